//! Real outages: the shared PostgreSQL and MariaDB servers stopped and
//! restarted under load, their sessions ended, a database or `serve`'s store
//! that stops answering, Redis paused and restarted, a Sentinel failover, a
//! Redis Cluster failover, slots resharded under load and a process killed
//! mid-update.
//!
//! A test here takes a server away from every other test that uses it, or
//! bounds how fast each call is answered. So these tests are a binary of their
//! own (cargo runs test binaries one after another, never side by side), and
//! each holds [`alone`] while it runs: no two of them overlap. A guard starts
//! a stopped server again even when its test fails.

#[path = "../common/mod.rs"]
mod common;
mod restart_under_load;

#[cfg(all(feature = "postgres", feature = "mysql"))]
mod database_outage;
#[cfg(feature = "postgres")]
mod database_restart;
mod outage_mysql;
mod outage_postgres;
mod postgres_sessions_ended;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
mod redis_outage;
#[cfg(feature = "redis")]
mod redis_reshard;
#[cfg(feature = "cli")]
mod redis_sentinel;
#[cfg(feature = "cli")]
mod serve_outage;
#[cfg(feature = "redis")]
mod slot_moves;

/// Held by each test of this binary while it runs: the tests run one at a
/// time, whatever `--test-threads` says. Hold it before anything that stops
/// a server, so that the server is back before the next test begins.
pub async fn alone() -> tokio::sync::MutexGuard<'static, ()> {
    static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    ALONE.lock().await
}
