//! `Limits`: the presets and limits of the site's own on every store, cost,
//! keys, the guard's settings, the earlier contract, and `limit-store.toml`.
//! One test binary, its tests side by side; `presets` holds the scenarios
//! that hold on any store.

#[path = "../common/mod.rs"]
mod common;
mod presets;

mod clock_step;
mod config;
mod cost;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
mod cost_stores;
mod guard;
mod keys;
mod legacy;
mod memory;
mod readme;
mod secrets_never_print;
#[cfg(feature = "sqlite")]
mod sqlite;
mod unavailable;
