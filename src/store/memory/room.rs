//! Room for new entries: each reserves its place within the bound and its
//! family's share before it is written; near the bound the store warns or
//! wakes its sweeper; a request that finds no room first makes some from
//! expired entries, in a bounded part of the store, and is then answered
//! unavailable, naming the family whose share is full, never a key.

use std::sync::atomic::Ordering;

use super::hashed_key::{Located, SHARDS};
use super::Inner;
use crate::bound::{FamilyId, Short};
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// Entries a full store's request looks at, at most, to make room, so that
/// one request never walks a large store: about two shards of a store at its
/// default bound, every shard of a small one.
const MAKE_ROOM_ENTRIES: usize = 4_096;

impl Inner {
    /// Reserves room for one new entry of each of `families`, all or none
    /// (the answer says what had no room), and near the bound warns or wakes
    /// the sweeper.
    pub(super) fn reserve_new(
        &self,
        families: impl Iterator<Item = FamilyId> + Clone,
        now: Millis,
    ) -> Result<(), Short> {
        let mut reserved = 0;
        for family in families.clone() {
            if let Err(short) = self.bound.try_reserve_in(family, 1) {
                for family in families.take(reserved) {
                    self.bound.release_in(family, 1);
                }
                return Err(short);
            }
            reserved += 1;
        }
        if reserved > 0 && u128::from(self.bound.held()) * 5 >= u128::from(self.bound.max()) * 4 {
            // Near the bound. If nothing can have expired, what is held is
            // live: warn. Else the sweeper removes what expired first, and
            // warns if what is left is still this full.
            if self.sweeper.get().is_none() || !self.may_hold_any_expired(now) {
                self.bound.note_fill();
            } else {
                self.wake.notify_one();
            }
        }
        Ok(())
    }

    /// True when `shard` may hold an entry expired at `now`.
    pub(super) fn may_hold_expired(&self, shard: usize, now: Millis) -> bool {
        self.earliest_expiry[shard % SHARDS].load(Ordering::Relaxed) <= now
    }

    /// True when any shard may hold an entry expired at `now`.
    pub(super) fn may_hold_any_expired(&self, now: Millis) -> bool {
        (0..SHARDS).any(|shard| self.may_hold_expired(shard, now))
    }

    /// A full store, or a family at its share (`short`): makes room from the
    /// expired entries of the shards of `keys` and of a few more that hold
    /// some (not the whole store: that is the sweeper's work, which this asks
    /// for); true if what `short` refused has room now.
    #[cold]
    pub(super) fn make_room(&self, keys: &[Located], short: Short) -> bool {
        self.wake.notify_one();
        let now = self.clock.now();
        let has_room = || self.bound.has_room(short);
        if has_room() {
            return true; // another caller's sweep, or a delete, made room
        }
        let more = (0..SHARDS).map(|_| self.next_shard.fetch_add(1, Ordering::Relaxed) % SHARDS);
        let mut looked = 0;
        for shard in keys.iter().map(|k| k.shard).chain(more) {
            if looked >= MAKE_ROOM_ENTRIES {
                break;
            }
            if !self.may_hold_expired(shard, now) {
                continue; // nothing there has expired: sweeping would find nothing
            }
            looked += self.shards[shard].lock().len();
            self.sweep_shard(shard, now);
            if has_room() {
                return true;
            }
        }
        false
    }

    /// The answer of a store at its bound, or of a family at its share,
    /// noted and logged. Names the family, never a key.
    #[cold]
    pub(super) fn full(&self, short: Short) -> StoreError {
        self.bound.note_short("memory", short);
        let max = self.bound.max();
        let detail = match short {
            Short::Bound => format!("the memory store holds its bound of {max} live entries"),
            Short::Share(family) => format!(
                "the keys of the family `{}` hold their share of the memory store's bound of {max} live entries \
                 (past 80% of it, a family adds new keys only while it holds no more than the room left)",
                self.bound.family_name(family)
            ),
        };
        StoreError::unavailable(Unavailable::Full, detail)
    }
}
