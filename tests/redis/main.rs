//! The Redis store: the contract, its behaviour beyond it, the shares of its
//! bound, and a server that became a replica. One test binary, its tests side
//! by side: on the shared server with keys of their own, or on a server of
//! their own (`common::redis::OwnRedis`). Outages and Sentinel failovers are in
//! `tests/outage/`; TLS, which sets process-wide variables, is
//! `tests/redis_tls.rs`, a binary of its own.

#[path = "../common/mod.rs"]
mod common;

#[cfg(feature = "cli")]
mod cluster;
#[cfg(feature = "testing")]
mod contract;
mod integer;
mod replica;
mod shares;
mod store;
