//! The store's log lines: their `kind`s, and a throttle so that each is written
//! at most once a minute however hard a store is pressed.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// `kind` of the warning that a store is at 80% of its bound.
pub const KIND_FILLING: &str = "limit-store-filling";
/// `kind` of the error that a full store refused a new key.
pub const KIND_FULL: &str = "limit-store-full";
/// `kind` of the error that a family of keys holding its share of a store's
/// bound had a new key refused (the family is named in the line).
pub const KIND_SHARE_FULL: &str = "limit-store-share-full";
/// `kind` of the warning that a store call was answered unavailable.
pub const KIND_UNAVAILABLE: &str = "limit-store-unavailable";

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
    use super::Throttle;

    #[test]
    fn once_a_minute() {
        let t = Throttle::new();
        assert!(t.ready());
        assert!(!t.ready());
        assert!(!t.ready());
    }
}
