//! The bound on live entries (`max_entries`) and its two log lines.
//!
//! A store never removes a live entry to make room: a full store answers a new
//! key unavailable, and keys it already holds keep counting.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::log::{Throttle, KIND_FILLING, KIND_FULL};

/// Counts the entries an in-process store holds against its bound, exactly under
/// concurrency: a new entry reserves its place before it is inserted.
#[derive(Debug)]
pub(crate) struct Bound {
    max: u64,
    held: AtomicU64,
    log: BoundLog,
}

impl Bound {
    pub(crate) fn new(max: u64) -> Self {
        Bound { max, held: AtomicU64::new(0), log: BoundLog::new() }
    }

    /// The bound.
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// Entries held now (live or expired and not yet removed).
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Reserves room for one new entry; false when the store is full.
    pub(crate) fn try_reserve(&self) -> bool {
        let before = self.held.fetch_add(1, Ordering::AcqRel);
        if before >= self.max {
            self.held.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        self.log.note_fill(before + 1, self.max);
        true
    }

    /// Gives back the room of `n` removed entries.
    pub(crate) fn release(&self, n: u64) {
        if n > 0 {
            self.held.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Logs that a new key was refused because the store is full.
    pub(crate) fn note_full(&self, store: &'static str) {
        self.log.note_full(store, self.held(), self.max);
    }
}

/// The bound's log lines, each at most once a minute; shared by every store.
#[derive(Debug)]
pub(crate) struct BoundLog {
    filling: Throttle,
    full: Throttle,
}

impl BoundLog {
    pub(crate) const fn new() -> Self {
        BoundLog { filling: Throttle::new(), full: Throttle::new() }
    }

    /// Warns once a minute while `live` is at or above 80% of `max`.
    pub(crate) fn note_fill(&self, live: u64, max: u64) {
        // live * 5 >= max * 4, without overflow for any u64 bound.
        if u128::from(live) * 5 >= u128::from(max) * 4 && self.filling.ready() {
            tracing::warn!(
                kind = KIND_FILLING,
                live,
                max_entries = max,
                "limit store is at 80% of its bound; raise max_entries or look for a flood of new keys"
            );
        }
    }

    /// Errors once a minute that a full store refused a new key.
    pub(crate) fn note_full(&self, store: &'static str, live: u64, max: u64) {
        if self.full.ready() {
            tracing::error!(
                kind = KIND_FULL,
                store,
                live,
                max_entries = max,
                "limit store is full: new keys are answered unavailable until entries expire; held keys keep counting"
            );
        }
    }
}
