//! The bound of a store that other instances share (the database and Redis
//! stores), without a scan per request.
//!
//! Each instance keeps the count of the live entries of its generation in a
//! [`Bound`] (the same one the memory store uses): an exact count at start and
//! after every sweep, plus what this instance added
//! and removed since. A request only touches the count (one atomic add, one
//! more for a removal). Near the bound the count is made exact again, at
//! most once a second, in the background; other instances' adds are seen at
//! that refresh, and reservations made while it ran are kept. So the bound
//! holds to within what the other instances add in a second while the store
//! is near full.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Instant;

use super::{Bound, Refresh};
use crate::StoreError;

/// Refresh the count at least this often, whatever the fill (by default).
const REFRESH_MS: i64 = 30_000;
/// And this often at or above 80% full (by default).
const REFRESH_NEAR_FULL_MS: i64 = 1_000;

/// A [`Bound`] on entries that other instances add too, made exact again by
/// counting now and then.
#[derive(Debug)]
pub(crate) struct SharedBound {
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
    store: &'static str,
    bound: Bound,
    /// How often to refresh: whatever the fill, and near full (ms).
    every_ms: i64,
    near_full_ms: i64,
    refreshed_ms: AtomicI64,
    refreshing: AtomicBool,
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
    made_room_ms: AtomicI64,
    started: Instant,
    /// Sweeps run since the store was made, and entries they removed.
    sweeps: AtomicU64,
    swept: AtomicU64,
}

impl SharedBound {
    /// A bound of `max` for the store named `store` in its log lines, of
    /// which `live` are held now.
    pub(crate) fn new(store: &'static str, max: u64, live: u64) -> Self {
        SharedBound {
            store,
            every_ms: REFRESH_MS,
            near_full_ms: REFRESH_NEAR_FULL_MS,
            bound: Bound::new(max, live),
            refreshed_ms: AtomicI64::new(0),
            refreshing: AtomicBool::new(false),
            made_room_ms: AtomicI64::new(i64::MIN),
            started: Instant::now(),
            sweeps: AtomicU64::new(0),
            swept: AtomicU64::new(0),
        }
    }

    /// Refreshes every `every` whatever the fill, and every `near_full` at
    /// or above 80%: for a store whose exact count costs more than an index
    /// scan.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn refreshing_every(mut self, every: std::time::Duration, near_full: std::time::Duration) -> Self {
        self.every_ms = i64::try_from(every.as_millis()).unwrap_or(i64::MAX);
        self.near_full_ms = i64::try_from(near_full.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// The count itself, for the updates' [`FamilyAdmission`](crate::bound::FamilyAdmission)s.
    pub(crate) fn counts(&self) -> &Bound {
        &self.bound
    }

    pub(crate) fn max(&self) -> u64 {
        self.bound.max()
    }

    pub(crate) fn estimate(&self) -> u64 {
        self.bound.held()
    }

    fn ms(&self) -> i64 {
        i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)
    }

    /// Notes a sweep that removed `removed` entries.
    pub(crate) fn note_sweep(&self, removed: u64) {
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        self.swept.fetch_add(removed, Ordering::Relaxed);
    }

    /// The store's fill and sweeps, for [`LimitStore::stats`](crate::LimitStore::stats).
    pub(crate) fn stats(&self) -> crate::StoreStats {
        crate::StoreStats::new(
            self.estimate(),
            self.max(),
            self.sweeps.load(Ordering::Relaxed),
            self.swept.load(Ordering::Relaxed),
        )
    }

    /// Starts an exact count (see [`Bound::begin_refresh`]).
    pub(crate) fn begin_refresh(&self) -> Refresh {
        self.bound.begin_refresh()
    }

    /// Sets the count from an exact one begun at `at`.
    pub(crate) fn refresh(&self, at: Refresh, live: u64) {
        self.bound.refresh(at, live);
        self.refreshed_ms.store(self.ms(), Ordering::Relaxed);
    }

    /// True when the count is due to be made exact; the caller that gets
    /// true runs it (one at a time) and then calls [`SharedBound::refreshed`].
    pub(crate) fn claim_refresh(&self) -> bool {
        let near_full = u128::from(self.estimate()) * 5 >= u128::from(self.max()) * 4;
        let every = if near_full { self.near_full_ms } else { self.every_ms };
        if self.ms() - self.refreshed_ms.load(Ordering::Relaxed) < every {
            return false;
        }
        self.refreshing.compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    /// Ends a refresh claimed with [`SharedBound::claim_refresh`].
    pub(crate) fn refreshed(&self, at: Refresh, live: Option<u64>) {
        if let Some(live) = live {
            self.refresh(at, live);
        }
        self.refreshing.store(false, Ordering::Release);
    }

    /// A full store: removes expired entries with `sweep` (which refreshes the
    /// count) at most once a second; true if there is room now.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
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
        self.estimate() < self.max()
    }

    /// Logs that a new key was refused because the store is full.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn note_full(&self) {
        self.bound.note_full(self.store);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bound::{FamilyAdmission, FamilyTags};

    #[test]
    fn a_refresh_keeps_what_was_reserved_while_it_counted() {
        let (bound, tags) = (SharedBound::new("test", 100, 50), FamilyTags::new());
        let family = bound.counts().family(b"api:", b"");
        let at = bound.begin_refresh();
        // Meanwhile this instance adds four entries; the count saw 40 live.
        let mut update = FamilyAdmission::new(bound.counts(), &tags);
        assert!(update.hold(vec![family; 4], vec![]).is_ok());
        update.commit();
        bound.refresh(at, 40);
        assert_eq!(bound.estimate(), 44);
    }
}
