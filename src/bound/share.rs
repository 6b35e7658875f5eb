//! Each family's share of a bound, so that a flood of new keys in one family
//! (one limit) leaves the others counting.
//!
//! The rule: below 80% of the bound, where the store warns
//! (`limit-store-filling`), any family adds new entries freely. Past it, a
//! family adds a new entry only while, with it, the family holds no more than
//! the room left free. Then:
//! - a flood in one family stops at 80% of the bound (alone, it holds more
//!   than the 20% left), and the room left never runs out: the entry that
//!   would take the last place is refused, since its family would hold more
//!   than nothing. Any other family can still add, up to about half of what
//!   is free;
//! - with k families flooding at once, at least a k-th of the last 20% stays
//!   free for the rest;
//! - a site with one busy family keeps 80% of the bound for it, and shares
//!   cost nothing below that. A higher mark would give a busy family more and
//!   leave the others less; 80% is where an operator is told already.
//!
//! The counts are exact where every add and removal passes through them (the
//! memory store); a share is judged on them as a new entry reserves its place,
//! so new keys of one family added at once may pass its share by one each.

use crossbeam_utils::CachePadded;
use std::sync::atomic::{AtomicU64, Ordering};

use super::family::{Families, FamilyId, FAMILIES};
use crate::log::{Kind, Throttle};

/// The entries each family holds, and their log throttles.
#[derive(Debug)]
pub(crate) struct Shares {
    pub(crate) families: Families,
    held: Box<[CachePadded<AtomicU64>]>,
    full_logs: Box<[Throttle]>,
}

/// The fill of a bound of `max` past which shares apply: 80% of it, rounded
/// up (so a bound under 5 has none).
pub(crate) fn shares_from(max: u64) -> u64 {
    max - max / 5
}

/// Whether a family may hold `family_after` entries when the store holds
/// `total_after` of `max`.
fn admits(family_after: u64, total_after: u64, max: u64) -> bool {
    total_after <= shares_from(max) || family_after <= max.saturating_sub(total_after)
}

impl Shares {
    pub(crate) fn new() -> Self {
        Shares {
            families: Families::new(),
            held: (0..FAMILIES).map(|_| CachePadded::new(AtomicU64::new(0))).collect(),
            full_logs: (0..FAMILIES).map(|_| Throttle::new()).collect(),
        }
    }

    /// Entries `family` holds.
    pub(crate) fn held(&self, family: FamilyId) -> u64 {
        self.held[family.index()].load(Ordering::Relaxed)
    }

    /// Adds `n` entries to `family` when its share has room for them with
    /// the store holding `total_after` of `max` (these included); false, and
    /// nothing added, when it has not.
    pub(crate) fn try_add(&self, family: FamilyId, n: u64, total_after: u64, max: u64) -> bool {
        let held = &self.held[family.index()];
        if total_after <= shares_from(max) {
            held.fetch_add(n, Ordering::Relaxed);
            return true;
        }
        let mut current = held.load(Ordering::Relaxed);
        loop {
            if !admits(current.saturating_add(n), total_after, max) {
                return false;
            }
            match held.compare_exchange_weak(current, current + n, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Gives back `n` entries of `family`.
    pub(crate) fn remove(&self, family: FamilyId, n: u64) {
        if n > 0 {
            let held = &self.held[family.index()];
            let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| Some(h.saturating_sub(n)));
        }
    }

    /// Sets what `family` holds, from an exact count (a shared store's).
    pub(crate) fn set(&self, family: FamilyId, held: u64) {
        self.held[family.index()].store(held, Ordering::Relaxed);
    }

    /// True when `family` could add `n` entries with the store holding
    /// `total` of `max` now.
    pub(crate) fn has_room(&self, family: FamilyId, n: u64, total: u64, max: u64) -> bool {
        total.saturating_add(n) <= max && admits(self.held(family).saturating_add(n), total.saturating_add(n), max)
    }

    /// Errors once a minute per family that `family`'s share refused a new
    /// key: the kind of a full store (the answer is the same, unavailable
    /// `full`), naming the family, never a key.
    pub(crate) fn note_full(&self, store: &'static str, family: FamilyId, live: u64, max: u64) {
        if self.full_logs[family.index()].ready() {
            tracing::error!(
                kind = Kind::Full.as_str(),
                store,
                family = self.families.name(family),
                held = self.held(family),
                live,
                max_entries = max,
                "a family of keys holds its share of the limit store: its new keys are answered unavailable until its entries expire; other families and held keys keep counting"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_apply_past_80_percent() {
        assert_eq!(shares_from(100_000), 80_000);
        assert_eq!(shares_from(10), 8);
        assert_eq!(shares_from(4), 4, "a bound under 5 has no shares");
        assert_eq!(shares_from(1), 1);
        // Up to the mark, anything; past it, no more than the room left.
        assert!(admits(80_000, 80_000, 100_000));
        assert!(!admits(80_001, 80_001, 100_000));
        assert!(admits(10_000, 90_000, 100_000));
        assert!(!admits(10_001, 90_000, 100_000));
        assert!(!admits(1, 100_000, 100_000), "the last place is never taken");
        assert!(admits(1, 99_999, 100_000));
    }

    /// One family alone stops at the mark; another then takes about half of
    /// what is left; a third still finds room.
    #[test]
    fn a_flood_in_one_family_leaves_room_for_the_others() {
        let shares = Shares::new();
        let (max, mut total) = (1_000, 0);
        let mut fill = |family: FamilyId| {
            let mut added = 0;
            while shares.try_add(family, 1, total + 1, max) {
                total += 1;
                added += 1;
            }
            added
        };
        let [api, sign_in, reset] =
            ["api:", "sign-in:", "password-reset:"].map(|f| shares.families.of(f.as_bytes(), b""));
        assert_eq!(fill(api), 800);
        assert_eq!(fill(sign_in), 100, "half of the 200 left");
        assert_eq!(fill(reset), 50);
        assert_eq!(fill(api), 0);
        assert_eq!((shares.held(api), shares.held(sign_in), shares.held(reset)), (800, 100, 50));
        shares.remove(api, 800);
        assert_eq!(shares.held(api), 0);
    }
}
