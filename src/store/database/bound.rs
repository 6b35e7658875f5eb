//! The database store's bound without a table scan per request.
//!
//! Each instance keeps an estimate of the live rows of its generation: an
//! exact count (an index range scan) taken at start and after every sweep,
//! plus the new entries this instance has added since. A request only touches
//! the estimate (one atomic add). Near the bound the estimate is made exact
//! again, at most once a second, in the background; other instances' adds are
//! seen at that refresh. So the bound holds to within what the other
//! instances add in a second while the table is near full.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use crate::bound::BoundLog;
use crate::StoreError;

/// Refresh the estimate at least this often, whatever the fill.
const REFRESH_MS: i64 = 30_000;
/// And this often at or above 80% full.
const REFRESH_NEAR_FULL_MS: i64 = 1_000;

#[derive(Debug)]
pub(crate) struct DbBound {
    max: u64,
    estimate: AtomicU64,
    refreshed_ms: AtomicI64,
    refreshing: AtomicBool,
    made_room_ms: AtomicI64,
    log: BoundLog,
    started: Instant,
}

impl DbBound {
    pub(crate) fn new(max: u64, live: u64) -> Self {
        DbBound {
            max,
            estimate: AtomicU64::new(live),
            refreshed_ms: AtomicI64::new(0),
            refreshing: AtomicBool::new(false),
            made_room_ms: AtomicI64::new(i64::MIN),
            log: BoundLog::new(),
            started: Instant::now(),
        }
    }

    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    pub(crate) fn estimate(&self) -> u64 {
        self.estimate.load(Ordering::Relaxed)
    }

    fn ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Room for `new` live entries? Counts them in when there is.
    pub(crate) fn admit(&self, new: u64) -> bool {
        if new == 0 {
            return true;
        }
        let mut current = self.estimate.load(Ordering::Relaxed);
        loop {
            if current.saturating_add(new) > self.max {
                return false;
            }
            match self.estimate.compare_exchange_weak(current, current + new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.log.note_fill(current + new, self.max);
        true
    }

    /// Gives back room counted in by [`DbBound::admit`] for entries that were
    /// not written after all.
    pub(crate) fn release(&self, n: u64) {
        let _ = self.estimate.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |e| Some(e.saturating_sub(n)));
    }

    /// Sets the estimate from an exact count.
    pub(crate) fn refresh(&self, live: u64) {
        self.estimate.store(live, Ordering::Relaxed);
        self.refreshed_ms.store(self.ms(), Ordering::Relaxed);
    }

    /// True when the estimate is due for an exact count; the caller that gets
    /// true runs it (one at a time) and then calls [`DbBound::refreshed`].
    pub(crate) fn claim_refresh(&self) -> bool {
        let near_full = u128::from(self.estimate()) * 5 >= u128::from(self.max) * 4;
        let every = if near_full { REFRESH_NEAR_FULL_MS } else { REFRESH_MS };
        if self.ms() - self.refreshed_ms.load(Ordering::Relaxed) < every {
            return false;
        }
        self.refreshing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Ends a refresh claimed with [`DbBound::claim_refresh`].
    pub(crate) fn refreshed(&self, live: Option<u64>) {
        if let Some(live) = live {
            self.refresh(live);
        }
        self.refreshing.store(false, Ordering::Release);
    }

    /// A full store: removes expired rows with `sweep` (which refreshes the
    /// estimate) at most once a second; true if there is room now.
    pub(crate) async fn make_room<F, Fut>(&self, sweep: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<u64, StoreError>>,
    {
        let now = self.ms();
        let last = self.made_room_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1_000
            && self.made_room_ms.compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed).is_ok()
        {
            let _ = sweep().await;
        }
        self.estimate() < self.max
    }

    /// Logs that a new key was refused because the store is full.
    pub(crate) fn note_full(&self) {
        self.log.note_full("database", self.estimate(), self.max);
    }
}

/// The room one update holds in the bound across its attempts: `apply` may
/// run more than once (a conditional write that missed, a retried deadlock),
/// and only the last run's new entries count.
#[derive(Debug)]
pub(crate) struct Admission<'a> {
    bound: &'a DbBound,
    held: u64,
}

impl<'a> Admission<'a> {
    pub(crate) fn new(bound: &'a DbBound) -> Self {
        Admission { bound, held: 0 }
    }

    /// Holds room for `new` entries in all (not in addition to what an
    /// earlier attempt held); false when the bound has no room for them.
    pub(crate) fn hold(&mut self, new: u64) -> bool {
        if new > self.held {
            if !self.bound.admit(new - self.held) {
                return false;
            }
        } else {
            self.bound.release(self.held - new);
        }
        self.held = new;
        true
    }

    /// Gives back what is held: the update wrote nothing.
    pub(crate) fn give_back(&mut self) {
        self.bound.release(self.held);
        self.held = 0;
    }

    pub(crate) fn max(&self) -> u64 {
        self.bound.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_exactly_up_to_the_bound() {
        let bound = DbBound::new(10, 7);
        assert!(bound.admit(2));
        assert!(!bound.admit(2));
        assert!(bound.admit(1));
        assert!(!bound.admit(1));
        assert!(bound.admit(0));
        bound.refresh(3);
        assert!(bound.admit(7));
    }

    #[test]
    fn an_update_holds_only_its_last_attempts_entries() {
        let bound = DbBound::new(10, 5);
        let mut update = Admission::new(&bound);
        assert!(update.hold(2));
        assert!(update.hold(2), "a second run of apply with the same new entries");
        assert_eq!(bound.estimate(), 7);
        assert!(update.hold(1));
        assert_eq!(bound.estimate(), 6);
        assert!(!update.hold(6), "no room for 6 more than the 5 held by others");
        assert_eq!(bound.estimate(), 6, "a refused hold keeps what was held");
        update.give_back();
        assert_eq!(bound.estimate(), 5);
    }
}
