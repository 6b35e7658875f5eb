//! The crate's log lines: every `kind` it writes, in one place, and a
//! throttle so that a line a store can repeat is written at most once a
//! minute however hard the store is pressed.
//!
//! Every line the crate and `limit-store serve` write through `tracing`
//! carries a `kind` field, one of the constants below: filter or alert on
//! it, never on the message. Each constant says the line's level and when it
//! is written. The values are stable.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

// Limits.

/// Warning, at most once a minute per limit: a store call failed or timed
/// out and the limit's policy answered (the line names the reason and the
/// policy).
pub const KIND_DEGRADED: &str = "limit-degraded";
/// Info, at most once a minute per limit: a limit in shadow mode let through
/// an attempt it would refuse.
pub const KIND_SHADOW_REFUSAL: &str = "limit-shadow-refusal";
/// Warning, at start: `Limits` counts in this process only and was not told
/// the site runs as one instance, so on several instances every budget
/// multiplies.
pub const KIND_NOT_SHARED: &str = "limit-store-not-shared";

// Stores and the guard.

/// Warning, at most once a minute: a store is at 80% of its bound.
pub const KIND_FILLING: &str = "limit-store-filling";
/// Error, at most once a minute: a full store refused a new key.
pub const KIND_FULL: &str = "limit-store-full";
/// Error, at most once a minute per family: a family of keys holding its
/// share of a store's bound had a new key refused (the family is named in
/// the line, never a key).
pub const KIND_SHARE_FULL: &str = "limit-store-share-full";
/// Warning, at most once a minute per reason: a store call was answered
/// unavailable (timed out, overloaded, full, failed).
pub const KIND_UNAVAILABLE: &str = "limit-store-unavailable";
/// Warning: a background sweep, or the count of a store's entries, failed;
/// it is tried again at the next interval.
pub const KIND_SWEEP_FAILED: &str = "limit-store-sweep-failed";
/// Info: the database had ended a pooled connection's session (a restart);
/// the count runs again on a fresh connection.
pub const KIND_SESSION_ENDED: &str = "limit-store-session-ended";
/// Warning: PostgreSQL's table could not be vacuumed after a large sweep;
/// autovacuum will.
pub const KIND_VACUUM_FAILED: &str = "limit-store-vacuum-failed";
/// Error, at connect: the Redis server's `maxmemory-policy` may evict
/// entries, and a dropped lockout is an attacker's fresh budget.
pub const KIND_REDIS_EVICTS: &str = "limit-store-redis-evicts";
/// Error, at most once a minute: the Redis server named by a plain URL is a
/// replica (after a failover) and refuses every write.
pub const KIND_REDIS_REPLICA: &str = "limit-store-redis-replica";
/// Warning: no Sentinel named a primary, or the primary named can't be
/// reached; asked again at the next failed call.
pub const KIND_REDIS_SENTINEL: &str = "limit-store-redis-sentinel";
/// Warning: the Redis primary moved (Sentinel) and counting goes on at the
/// new one.
pub const KIND_REDIS_FAILOVER: &str = "limit-store-redis-failover";

// The layer.

/// Warning: a limit call in the layer or `layer::attempt` failed for a
/// reason other than an unavailable store: a refused or corrupt store
/// (answered 503) or a limit misconfigured in code (500).
pub const KIND_LAYER_ERROR: &str = "limit-layer-error";
/// Warning, once per process: requests come without their peer address, so
/// a layer keyed by it finds no key.
pub const KIND_LAYER_NO_PEER_ADDRESS: &str = "limit-layer-no-peer-address";

// `limit-store serve`.

/// Debug: one line per HTTP request.
pub const KIND_REQUEST: &str = "limit-store-request";
/// Debug: a connection ended with an error.
pub const KIND_CONNECTION: &str = "limit-store-connection";
/// Warning, then info when it answers again: the store does not answer
/// `/healthz` (the store's own error is here, never in the answer).
pub const KIND_HEALTH: &str = "limit-store-health";
/// Warning, at start: the open-file limit could not be raised to fit
/// `serve.max_connections`, so the cap was lowered to what it allows.
pub const KIND_CONNECTIONS_CAPPED: &str = "limit-store-connections-capped";
/// Warning, at most once a minute: every connection place is taken; new
/// connections wait until one closes.
pub const KIND_CONNECTIONS_FULL: &str = "limit-store-connections-full";
/// Warning, at most once a minute: accepting a connection failed.
pub const KIND_ACCEPT_FAILED: &str = "limit-store-accept-failed";
/// Info: SIGTERM or Ctrl-C; no new connections, and the requests in flight
/// have the shutdown grace to finish.
pub const KIND_DRAINING: &str = "limit-store-draining";
/// Warning: the shutdown grace ran out and the connections still open were
/// closed.
pub const KIND_DRAIN_CUT: &str = "limit-store-drain-cut";
/// Info: the limits' settings were reloaded; counts and counters are kept.
pub const KIND_CONFIG_RELOADED: &str = "limit-store-config-reloaded";
/// Error: changed settings could not be used (the line says where); the
/// running ones stay.
pub const KIND_CONFIG_REFUSED: &str = "limit-store-config-refused";
/// Warning: settings that apply only at the next start changed (the store's,
/// `deadline`, `max_in_flight`, `[serve]`).
pub const KIND_CONFIG_RESTART: &str = "limit-store-config-restart";
/// Info: SIGHUP, but `serve` started without a settings file, so there is
/// nothing to reload.
pub const KIND_CONFIG_NOT_RELOADED: &str = "limit-store-config-not-reloaded";
/// Info: the Envoy rules were reloaded; the counts are kept.
pub const KIND_ENVOY_RELOADED: &str = "limit-store-envoy-reloaded";
/// Error: changed Envoy rules could not be used; the running ones stay.
pub const KIND_ENVOY_REFUSED: &str = "limit-store-envoy-refused";

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

    /// Every kind above, so that none repeats another's value.
    const ALL: [&str; 30] = [
        KIND_DEGRADED,
        KIND_SHADOW_REFUSAL,
        KIND_NOT_SHARED,
        KIND_FILLING,
        KIND_FULL,
        KIND_SHARE_FULL,
        KIND_UNAVAILABLE,
        KIND_SWEEP_FAILED,
        KIND_SESSION_ENDED,
        KIND_VACUUM_FAILED,
        KIND_REDIS_EVICTS,
        KIND_REDIS_REPLICA,
        KIND_REDIS_SENTINEL,
        KIND_REDIS_FAILOVER,
        KIND_LAYER_ERROR,
        KIND_LAYER_NO_PEER_ADDRESS,
        KIND_REQUEST,
        KIND_CONNECTION,
        KIND_HEALTH,
        KIND_CONNECTIONS_CAPPED,
        KIND_CONNECTIONS_FULL,
        KIND_ACCEPT_FAILED,
        KIND_DRAINING,
        KIND_DRAIN_CUT,
        KIND_CONFIG_RELOADED,
        KIND_CONFIG_REFUSED,
        KIND_CONFIG_RESTART,
        KIND_CONFIG_NOT_RELOADED,
        KIND_ENVOY_RELOADED,
        KIND_ENVOY_REFUSED,
    ];

    #[test]
    fn kinds_are_distinct_and_named_for_the_crate() {
        let mut seen = std::collections::HashSet::new();
        for kind in ALL {
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
