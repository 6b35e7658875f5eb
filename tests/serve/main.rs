//! `limit-store serve`, the real binary over real sockets: the HTTP API,
//! limits of the site's own, cost, reload, hostile and slow clients, the
//! status page, and Envoy's rate limit service. One test binary, its tests
//! side by side, each with `serve` processes of its own; `serve` losing its
//! database is in `tests/outage/`.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod bad_requests;
mod contract_command;
#[cfg(feature = "sqlite")]
mod cost;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod envoy;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod envoy_attacks;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod envoy_messages;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod envoy_wire;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod first_run;
mod http_attacks;
mod openapi;
mod reload;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod shared;
mod site_limits;
mod site_limits_reload;
mod site_limits_shared;
mod slow_clients;
#[cfg(feature = "postgres")]
mod slow_store;
mod status_page;
mod store_commands;
mod token;
#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod venv;
