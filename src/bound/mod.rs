//! The bound on live entries (`max_entries`), each family's share of it, and
//! their log lines.
//!
//! A store never removes a live entry to make room: a full store answers a new
//! key unavailable, and keys it already holds keep counting. Past 80% of the
//! bound each family of keys (a limit) adds only within its share
//! (`share.rs`), so a flood of new keys in one leaves the others counting.

mod family;
mod share;

pub(crate) use family::{FamilyId, PerFamily, FAMILIES};

use std::sync::atomic::{AtomicU64, Ordering};

use crate::log::{Kind, Throttle};
use share::Shares;

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
mod shared;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
mod tags;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) use shared::SharedBound;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) use tags::{FamilyAdmission, FamilyTags, Tag};

/// Counts the entries a store holds against its bound: exactly for an
/// in-process store (every add and removal passes through it), as an estimate
/// kept close by exact counts for a shared one ([`Bound::begin_refresh`]).
/// A new entry reserves its place before it is written, so concurrent adds
/// never pass the bound; a removal gives its place back.
///
/// A store that knows each entry's family ([`Bound::family`]) reserves and
/// gives back per family ([`Bound::try_reserve_in`], [`Bound::release_in`]),
/// and its families then share the bound. Every store does: the shared ones
/// learn each entry's family from its tag (`tags.rs`).
#[derive(Debug)]
pub(crate) struct Bound {
    max: u64,
    held: AtomicU64,
    shares: Shares,
    /// Every place ever reserved: what a refresh adds to its count for the
    /// reservations made while the count ran.
    reserved: AtomicU64,
    /// Warn at 80% as places are reserved; off for a store whose count holds
    /// expired entries until a sweep (it warns after sweeping instead).
    warn_on_reserve: bool,
    log: BoundLog,
}

#[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis")), allow(dead_code))]
impl Bound {
    pub(crate) fn new(max: u64, held: u64) -> Self {
        Bound {
            max,
            held: AtomicU64::new(held),
            shares: Shares::new(),
            reserved: AtomicU64::new(0),
            warn_on_reserve: true,
            log: BoundLog::new(),
        }
    }

    /// A bound that warns only when told ([`Bound::note_fill`]).
    pub(crate) fn quiet(max: u64) -> Self {
        Bound { warn_on_reserve: false, ..Bound::new(max, 0) }
    }

    /// The bound.
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// Entries held now, as counted.
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Reserves room for `n` new entries of `family`: within the bound, and
    /// within the family's share of it. Nothing is reserved when either has
    /// no room: the answer says which.
    pub(crate) fn try_reserve_in(&self, family: FamilyId, n: u64) -> Result<(), Short> {
        if n == 0 {
            return Ok(());
        }
        let total = self.add_held(n).ok_or(Short::Bound)?;
        if !self.shares.try_add(family, n, total, self.max) {
            self.release(n);
            return Err(Short::Share(family));
        }
        self.reserved_now(n, total);
        Ok(())
    }

    /// Adds `n` to what is held when the bound has room; what is held then.
    fn add_held(&self, n: u64) -> Option<u64> {
        let mut current = self.held.load(Ordering::Relaxed);
        loop {
            let after = current.saturating_add(n);
            if after > self.max {
                return None;
            }
            match self.held.compare_exchange_weak(current, after, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(after),
                Err(seen) => current = seen,
            }
        }
    }

    /// Notes `n` places reserved, leaving `total` held.
    fn reserved_now(&self, n: u64, total: u64) {
        self.reserved.fetch_add(n, Ordering::Relaxed);
        if self.warn_on_reserve {
            self.log.note_fill(total, self.max);
        }
    }

    /// Gives back the room of `n` entries of `family`.
    pub(crate) fn release_in(&self, family: FamilyId, n: u64) {
        self.shares.remove(family, n);
        self.release(n);
    }

    /// Gives back the room of the entries counted in `removed`.
    pub(crate) fn release_each(&self, removed: &PerFamily) {
        for (family, n) in removed.iter() {
            self.release_in(family, n);
        }
    }

    /// The family of the key `head` followed by `tail` (see `family.rs`).
    pub(crate) fn family(&self, head: &[u8], tail: &[u8]) -> FamilyId {
        self.shares.families.of(head, tail)
    }

    /// True when what `short` refused would find room for one entry now.
    pub(crate) fn has_room(&self, short: Short) -> bool {
        match short {
            Short::Bound => self.held() < self.max,
            Short::Share(family) => self.shares.has_room(family, 1, self.held(), self.max),
        }
    }

    /// Gives back the room of `n` entries removed, or reserved and not written.
    pub(crate) fn release(&self, n: u64) {
        if n > 0 {
            let _ = self.held.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |h| Some(h.saturating_sub(n)));
        }
    }

    /// Starts an exact count of the entries held: keep the answer for
    /// [`Bound::refresh`], which adds what was reserved meanwhile.
    pub(crate) fn begin_refresh(&self) -> Refresh {
        Refresh { reserved: self.reserved.load(Ordering::Acquire) }
    }

    /// Sets the count from an exact one begun with `at`. Places reserved
    /// while it ran may or may not be in it: they are counted again, so the
    /// bound errs on the side of refusing.
    pub(crate) fn refresh(&self, at: Refresh, counted: u64) {
        let since = self.reserved.load(Ordering::Acquire).saturating_sub(at.reserved);
        self.held.store(counted.saturating_add(since), Ordering::Relaxed);
    }

    /// Sets what `family` holds from an exact count (a shared store that
    /// knows its entries' families, at a refresh).
    pub(crate) fn refresh_family(&self, family: FamilyId, counted: u64) {
        self.shares.set(family, counted);
    }

    /// Warns once a minute if what is held is at or above 80% of the bound.
    pub(crate) fn note_fill(&self) {
        self.log.note_fill(self.held(), self.max);
    }

    /// Logs that a new key was refused because the store is full.
    pub(crate) fn note_full(&self, store: &'static str) {
        self.log.note_full(store, self.held(), self.max);
    }

    /// Logs that a new key was refused, for the reason `short` gives.
    pub(crate) fn note_short(&self, store: &'static str, short: Short) {
        match short {
            Short::Bound => self.note_full(store),
            Short::Share(family) => self.shares.note_full(store, family, self.held(), self.max),
        }
    }

    /// The name of `family`, for a message.
    pub(crate) fn family_name(&self, family: FamilyId) -> &str {
        self.shares.families.name(family)
    }
}

/// Why a new entry found no room.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Short {
    /// The store holds its bound.
    Bound,
    /// The family holds its share of the bound.
    Share(FamilyId),
}

/// Where an exact count of a [`Bound`] began.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis")), allow(dead_code))]
pub(crate) struct Refresh {
    reserved: u64,
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
                kind = Kind::Filling.as_str(),
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
                kind = Kind::Full.as_str(),
                store,
                live,
                max_entries = max,
                "limit store is full: new keys are answered unavailable until entries expire; held keys keep counting"
            );
        }
    }
}
