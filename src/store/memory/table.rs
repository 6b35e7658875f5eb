//! One shard's entries, in two tables by the kind of value: an integer (what
//! a limit's GCRA holds, and any counter kept as a bare number) in a 32-byte
//! slot, two to a cache line; any other value in a 64-byte slot of its own
//! line (compact, see `stored.rs`). At 100,000 counted integers the table is
//! 4.2 MB, where 64-byte slots made 8.4 MB, so the one cache miss of a count
//! reaches less memory, and an entry costs half the bytes.
//!
//! A key is in one of the two at most. A lookup tries the integers first; a
//! write whose value changes kind moves the key to the other table.
//!
//! A slot's key is the key's 128-bit keyed hash with its family in the top
//! bits ([`FAMILY_SHIFT`]): a lookup compares the rest, and a removal gives
//! the entry's place back to its family.

use hashbrown::HashTable;

use super::hashed_key::{low_half, Located, FAMILY_SHIFT, IDENTITY};
use super::spare_map;
use super::stored::Stored;
use crate::bound::{FamilyId, PerFamily};
use crate::{Entry, Millis};

/// A key whose value is an integer.
#[derive(Debug)]
#[repr(align(32))]
pub(super) struct IntSlot {
    /// The key's keyed hash and its family (see the module's docs).
    key: u128,
    expires_at: Millis,
    value: i64,
}

/// A key whose value is anything but an integer.
#[derive(Debug)]
#[repr(align(64))]
pub(super) struct Slot {
    /// As [`IntSlot::key`].
    key: u128,
    expires_at: Millis,
    /// Compact: see [`Stored`]; never [`Stored::Int`], which goes to an [`IntSlot`].
    value: Stored,
}

// Aligned to their size, a slot never spans two cache lines: a bigger value
// would make every slot span two, or cost a line more.
const _: () = assert!(std::mem::size_of::<IntSlot>() == 32);
const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// A shard's entries.
#[derive(Default)]
pub(super) struct Table {
    ints: HashTable<IntSlot>,
    others: HashTable<Slot>,
}

/// A key's slot, found in either table.
pub(super) enum SlotMut<'a> {
    Int(&'a mut IntSlot),
    Other(&'a mut Slot),
}

/// A slot's key: `k`'s, with `family` in its top bits.
fn slot_key(k: &Located, family: FamilyId) -> u128 {
    k.key | ((family.index() as u128) << FAMILY_SHIFT)
}

/// The family a slot's key holds.
fn family_of(slot_key: u128) -> FamilyId {
    FamilyId::from_index(usize::try_from(slot_key >> FAMILY_SHIFT).unwrap_or(usize::MAX))
}

/// True when a slot's key is `k`'s.
#[inline]
fn names(slot_key: u128, k: &Located) -> bool {
    let apart = slot_key ^ k.key;
    // Truncation wanted: the high half, its family's bits left out.
    #[allow(clippy::cast_possible_truncation)]
    let high = (apart >> 64) as u64 & (IDENTITY >> 64) as u64;
    low_half(apart) | high == 0
}

impl Table {
    /// Entries held, live or expired.
    pub(super) fn len(&self) -> usize {
        self.ints.len() + self.others.len()
    }

    /// The slot of `k`, if it has one.
    #[inline]
    pub(super) fn find_mut(&mut self, k: &Located) -> Option<SlotMut<'_>> {
        if let Some(slot) = self.ints.find_mut(k.hash, |s| names(s.key, k)) {
            return Some(SlotMut::Int(slot));
        }
        self.others.find_mut(k.hash, |s| names(s.key, k)).map(SlotMut::Other)
    }

    /// The live entry of `k`, rebuilt.
    pub(super) fn get(&self, k: &Located, now: Millis) -> Option<Entry> {
        if let Some(slot) = self.ints.find(k.hash, |s| names(s.key, k)) {
            return (slot.expires_at > now).then(|| Entry { value: slot.value.into(), expires_at: slot.expires_at });
        }
        let slot = self.others.find(k.hash, |s| names(s.key, k))?;
        (slot.expires_at > now).then(|| Entry { value: slot.value.value(), expires_at: slot.expires_at })
    }

    /// Holds `value` for `k`, which has a slot, until `expires_at`: in place
    /// when the slot holds a value of the same kind.
    pub(super) fn set(&mut self, k: &Located, expires_at: Millis, value: Stored) {
        if let Some(slot) = self.find_mut(k) {
            if let Err(value) = slot.set(expires_at, value) {
                self.change_kind(k, expires_at, value);
            }
        }
    }

    /// Holds `value` for `k`, of `family`, which is held in neither table.
    pub(super) fn insert(&mut self, k: &Located, family: FamilyId, expires_at: Millis, value: Stored) {
        self.insert_slot(k.hash, slot_key(k, family), expires_at, value);
    }

    fn insert_slot(&mut self, hash: u64, key: u128, expires_at: Millis, value: Stored) {
        match value {
            Stored::Int(value) => {
                self.ints.insert_unique(hash, IntSlot { key, expires_at, value }, |s| low_half(s.key));
            }
            value => {
                self.others.insert_unique(hash, Slot { key, expires_at, value }, |s| low_half(s.key));
            }
        }
    }

    /// Holds `value` for `k`, whose slot holds a value of the other kind (its
    /// [`set`](SlotMut::set) refused `value`): the key moves to the other
    /// table, with its family.
    pub(super) fn change_kind(&mut self, k: &Located, expires_at: Millis, value: Stored) {
        let moved = match value {
            Stored::Int(_) => self.others.find_entry(k.hash, |s| names(s.key, k)).ok().map(|slot| slot.remove().0.key),
            _ => self.ints.find_entry(k.hash, |s| names(s.key, k)).ok().map(|slot| slot.remove().0.key),
        };
        debug_assert!(moved.is_some(), "a key changes kind from a slot of the other kind");
        if let Some(key) = moved {
            self.insert_slot(k.hash, key, expires_at, value);
        }
    }

    /// Drops the entry of `k`; its family if it had one.
    pub(super) fn remove(&mut self, k: &Located) -> Option<FamilyId> {
        if let Ok(slot) = self.ints.find_entry(k.hash, |s| names(s.key, k)) {
            return Some(family_of(slot.remove().0.key));
        }
        if let Ok(slot) = self.others.find_entry(k.hash, |s| names(s.key, k)) {
            return Some(family_of(slot.remove().0.key));
        }
        None
    }

    /// Drops every entry expired at `now`, each counted in `removed` by
    /// family; the earliest expiry of those left ([`Millis::MAX`] for none).
    pub(super) fn retain_live(&mut self, now: Millis, removed: &mut PerFamily) -> Millis {
        let mut earliest = Millis::MAX;
        let mut live = |key: u128, expires_at: Millis| {
            let live = expires_at > now;
            if live {
                earliest = earliest.min(expires_at);
            } else {
                removed.add_one(family_of(key));
            }
            live
        };
        self.ints.retain(|s| live(s.key, s.expires_at));
        self.others.retain(|s| live(s.key, s.expires_at));
        earliest
    }
}

impl SlotMut<'_> {
    /// The same slot, borrowed again for a shorter while.
    #[inline]
    pub(super) fn reborrow(&mut self) -> SlotMut<'_> {
        match self {
            SlotMut::Int(slot) => SlotMut::Int(slot),
            SlotMut::Other(slot) => SlotMut::Other(slot),
        }
    }

    #[inline]
    pub(super) fn is_live(&self, now: Millis) -> bool {
        self.expires_at() > now
    }

    /// When the slot's entry expires.
    #[inline]
    pub(super) fn expires_at(&self) -> Millis {
        match self {
            SlotMut::Int(slot) => slot.expires_at,
            SlotMut::Other(slot) => slot.expires_at,
        }
    }

    /// The value as one integer, when it is one, read in place.
    #[inline]
    pub(super) fn as_i64(&self) -> Option<i64> {
        match self {
            SlotMut::Int(slot) => Some(slot.value),
            SlotMut::Other(_) => None,
        }
    }

    /// Lends the entry to `apply`: a plain value is moved out (not cloned),
    /// text is parsed and stays; [`put_back`](Self::put_back) undoes it.
    #[inline]
    pub(super) fn lend(&mut self) -> Entry {
        match self {
            SlotMut::Int(slot) => Entry { value: slot.value.into(), expires_at: slot.expires_at },
            SlotMut::Other(slot) => Entry { value: slot.value.lend(), expires_at: slot.expires_at },
        }
    }

    /// Gives back what [`lend`](Self::lend) took, for a key left as it was.
    #[inline]
    pub(super) fn put_back(&mut self, entry: Entry) {
        match self {
            SlotMut::Int(_) => spare_map::keep(entry.value),
            SlotMut::Other(slot) => slot.value.put_back(entry.value),
        }
    }

    /// Writes `value` in place when this slot holds its kind; else gives it
    /// back, for the key to move to the other table.
    #[inline]
    pub(super) fn set(self, expires_at: Millis, value: Stored) -> Result<(), Stored> {
        match (self, value) {
            (SlotMut::Int(slot), Stored::Int(n)) => {
                slot.expires_at = expires_at;
                slot.value = n;
                Ok(())
            }
            (SlotMut::Other(slot), value) if !matches!(value, Stored::Int(_)) => {
                slot.expires_at = expires_at;
                slot.value = value;
                Ok(())
            }
            (_, value) => Err(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{Entry, LimitStore, MemoryStore, Write};

    const LATER: i64 = i64::MAX / 2;

    /// A key whose value changes kind (an integer, then an object, then an
    /// integer again) moves between the store's two tables: read back as
    /// written each time, seen by the integer count only while it holds one,
    /// and held once throughout.
    #[tokio::test]
    async fn a_value_that_changes_kind_moves_and_is_held_once() {
        let store = MemoryStore::new();
        let start = store.key_start("limit:part:");
        let count = |n: i64| {
            let step = |held: Option<(i64, i64)>, _| (Some((n, LATER)), held.map(|(value, _)| value));
            store.count_number_after(&start, b"k", step).unwrap()
        };
        let read = |store: MemoryStore| async move { store.read(&["limit:part:k"]).await.unwrap()[0].clone() };
        let seen = count(7);
        assert_eq!(seen, None, "new");
        let object = Write::Put(Entry { value: json!({"n": 1}), expires_at: LATER });
        store
            .update(&["limit:part:k"], &mut |cur: &[Option<Entry>], _| {
                assert_eq!(cur[0].as_ref().map(|e| e.value.clone()), Some(json!(7)));
                vec![object.clone()]
            })
            .await
            .unwrap();
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!({"n": 1})));
        assert_eq!(store.inner.bound.held(), 1);
        let seen = count(8);
        assert_eq!(seen, None, "an object is no integer to count on");
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!(8)));
        let seen = count(9);
        assert_eq!(seen, Some(8));
        assert_eq!(store.inner.bound.held(), 1, "held once, in one table");
        store.update(&["limit:part:k"], &mut |_: &[Option<Entry>], _| vec![Write::Delete]).await.unwrap();
        assert_eq!(read(store.clone()).await, None);
        assert_eq!(store.inner.bound.held(), 0);
    }
}
