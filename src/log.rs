//! The crate's log lines: every `kind` it writes, in one place ([`Kind`]),
//! and a throttle so that a line a store can repeat is written at most once a
//! minute however hard the store is pressed.
//!
//! Every line the crate and `limit-store serve` write through `tracing`
//! carries a `kind` field, the text of one [`Kind`]: filter or alert on it,
//! never on the message. Each kind says the line's level and when it is
//! written. The texts are stable.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// The `kind` field of a log line: a `Kind` prints as its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    // Limits.
    /// Warning, at most once a minute per limit: a store call failed or timed
    /// out and the limit's policy answered (the line names the reason and the
    /// policy).
    Degraded,
    /// Info, at most once a minute per limit: a limit in shadow mode let through
    /// an attempt it would refuse.
    ShadowRefusal,
    /// Warning, at start: `Limits` counts in this process only and was not told
    /// the site runs as one instance, so on several instances every budget
    /// multiplies.
    NotShared,
    // Stores and the guard.
    /// Warning, at most once a minute: a store is at 80% of its bound.
    Filling,
    /// Error: a new key was refused for want of room, answered unavailable
    /// (`full`). At most once a minute when the store itself is full, and
    /// once a minute per family when a family of keys holds its share of the
    /// bound; that line names the family (`family`), never a key.
    Full,
    /// Warning, at most once a minute per reason: a store call was answered
    /// unavailable (timed out, overloaded, full, failed).
    Unavailable,
    /// Debug: a sweep ran (a store's background sweeper, or Redis's `sweep`)
    /// and says how many expired entries it removed.
    Swept,
    /// Warning: a background sweep, or the count of a store's entries, failed;
    /// it is tried again at the next interval.
    SweepFailed,
    /// Info: the database had ended a pooled connection's session (a restart);
    /// the count runs again on a fresh connection.
    SessionEnded,
    /// Warning: PostgreSQL's table could not be vacuumed after a large sweep;
    /// autovacuum will.
    VacuumFailed,
    /// Error, at connect: the Redis server's `maxmemory-policy` may evict
    /// entries, and a dropped lockout is an attacker's fresh budget.
    RedisEvicts,
    /// Error, at most once a minute: the Redis server named by a plain URL is a
    /// replica (after a failover) and refuses every write.
    RedisReplica,
    /// Warning: no Sentinel named a primary, or the primary named can't be
    /// reached; asked again at the next failed call.
    RedisSentinel,
    /// Warning: the Redis primary moved (Sentinel) and counting goes on at the
    /// new one.
    RedisFailover,
    /// Debug: on a cluster, a committed update's locks could not be cleared
    /// where no caller waited; the next reader of each key settles them.
    RedisLocksLeft,
    // The layer.
    /// Warning: a limit call in the layer or `layer::attempt` failed for a
    /// reason other than an unavailable store: a refused or corrupt store
    /// (answered 503) or a limit misconfigured in code (500).
    LayerError,
    /// Warning, once per process: requests come without their peer address, so
    /// a layer keyed by it finds no key.
    LayerNoPeerAddress,
    // `limit-store serve`.
    /// Info, at start, one line per port: where `serve` listens (the HTTP
    /// line also says which store, its bound and the connection cap).
    Listening,
    /// Info: `serve` stopped, after its drain.
    Stopped,
    /// Info, at start: the Envoy rules were loaded (their file, domains and count).
    EnvoyLoaded,
    /// Debug: one line per HTTP request.
    Request,
    /// Debug: a connection ended with an error.
    Connection,
    /// Warning, then info when it answers again: the store does not answer
    /// `/healthz` (the store's own error is here, never in the answer).
    Health,
    /// Warning, at start: the open-file limit could not be raised to fit
    /// `serve.max_connections`, so the cap was lowered to what it allows.
    ConnectionsCapped,
    /// Warning, at most once a minute per port (its `port` field, `HTTP` or
    /// `gRPC`): every connection place is taken; new connections wait until
    /// one closes.
    ConnectionsFull,
    /// Warning, at most once a minute per port (`port`): accepting a
    /// connection failed.
    AcceptFailed,
    /// Info: SIGTERM or Ctrl-C; no new connections, and the requests in flight
    /// have the shutdown grace to finish.
    Draining,
    /// Warning, per port (`port` on the gRPC port's): the shutdown grace ran
    /// out and the connections still open were closed.
    DrainCut,
    /// Info: the limits' settings were reloaded; counts and counters are kept.
    ConfigReloaded,
    /// Error: changed settings could not be used (the line says where); the
    /// running ones stay.
    ConfigRefused,
    /// Warning: settings that apply only at the next start changed (the store's,
    /// `deadline`, `max_in_flight`, `[serve]`).
    ConfigRestart,
    /// Info: SIGHUP, but `serve` started without a settings file, so there is
    /// nothing to reload.
    ConfigNotReloaded,
    /// Info: the Envoy rules were reloaded; the counts are kept.
    EnvoyReloaded,
    /// Error: changed Envoy rules could not be used; the running ones stay.
    EnvoyRefused,
}

impl Kind {
    /// The text of the `kind` field, `limit-...`: stable (as it prints).
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Degraded => "limit-degraded",
            Kind::ShadowRefusal => "limit-shadow-refusal",
            Kind::NotShared => "limit-store-not-shared",
            Kind::Filling => "limit-store-filling",
            Kind::Full => "limit-store-full",
            Kind::Unavailable => "limit-store-unavailable",
            Kind::Swept => "limit-store-swept",
            Kind::SweepFailed => "limit-store-sweep-failed",
            Kind::SessionEnded => "limit-store-session-ended",
            Kind::VacuumFailed => "limit-store-vacuum-failed",
            Kind::RedisEvicts => "limit-store-redis-evicts",
            Kind::RedisReplica => "limit-store-redis-replica",
            Kind::RedisSentinel => "limit-store-redis-sentinel",
            Kind::RedisFailover => "limit-store-redis-failover",
            Kind::RedisLocksLeft => "limit-store-redis-locks-left",
            Kind::LayerError => "limit-layer-error",
            Kind::LayerNoPeerAddress => "limit-layer-no-peer-address",
            Kind::Listening => "limit-store-listening",
            Kind::Stopped => "limit-store-stopped",
            Kind::EnvoyLoaded => "limit-store-envoy-loaded",
            Kind::Request => "limit-store-request",
            Kind::Connection => "limit-store-connection",
            Kind::Health => "limit-store-health",
            Kind::ConnectionsCapped => "limit-store-connections-capped",
            Kind::ConnectionsFull => "limit-store-connections-full",
            Kind::AcceptFailed => "limit-store-accept-failed",
            Kind::Draining => "limit-store-draining",
            Kind::DrainCut => "limit-store-drain-cut",
            Kind::ConfigReloaded => "limit-store-config-reloaded",
            Kind::ConfigRefused => "limit-store-config-refused",
            Kind::ConfigRestart => "limit-store-config-restart",
            Kind::ConfigNotReloaded => "limit-store-config-not-reloaded",
            Kind::EnvoyReloaded => "limit-store-envoy-reloaded",
            Kind::EnvoyRefused => "limit-store-envoy-refused",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

const INTERVAL_MS: i64 = 60_000;
const NEVER: i64 = i64::MIN;

/// Lets one log line through per minute (monotonic time, so clock steps don't matter).
#[derive(Debug)]
pub(crate) struct Throttle {
    last: AtomicI64,
}

impl Throttle {
    pub(crate) const fn new() -> Self {
        Throttle { last: AtomicI64::new(NEVER) }
    }

    /// True at most once per minute: the caller that gets `true` writes the line.
    pub(crate) fn ready(&self) -> bool {
        let now = monotonic_ms();
        let last = self.last.load(Ordering::Relaxed);
        if last != NEVER && now - last < INTERVAL_MS {
            return false;
        }
        self.last.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

fn monotonic_ms() -> i64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind above, so that none repeats another's text.
    const ALL: [Kind; 34] = [
        Kind::Degraded,
        Kind::ShadowRefusal,
        Kind::NotShared,
        Kind::Filling,
        Kind::Full,
        Kind::Unavailable,
        Kind::Swept,
        Kind::SweepFailed,
        Kind::SessionEnded,
        Kind::VacuumFailed,
        Kind::RedisEvicts,
        Kind::RedisReplica,
        Kind::RedisSentinel,
        Kind::RedisFailover,
        Kind::RedisLocksLeft,
        Kind::LayerError,
        Kind::LayerNoPeerAddress,
        Kind::Listening,
        Kind::Stopped,
        Kind::EnvoyLoaded,
        Kind::Request,
        Kind::Connection,
        Kind::Health,
        Kind::ConnectionsCapped,
        Kind::ConnectionsFull,
        Kind::AcceptFailed,
        Kind::Draining,
        Kind::DrainCut,
        Kind::ConfigReloaded,
        Kind::ConfigRefused,
        Kind::ConfigRestart,
        Kind::ConfigNotReloaded,
        Kind::EnvoyReloaded,
        Kind::EnvoyRefused,
    ];

    #[test]
    fn kinds_are_distinct_and_named_for_the_crate() {
        let mut seen = std::collections::HashSet::new();
        for kind in ALL.map(Kind::as_str) {
            assert!(kind.starts_with("limit-"), "{kind}");
            assert!(seen.insert(kind), "{kind} is the value of two kinds");
        }
    }

    #[test]
    fn once_a_minute() {
        let t = Throttle::new();
        assert!(t.ready());
        assert!(!t.ready());
        assert!(!t.ready());
    }
}
