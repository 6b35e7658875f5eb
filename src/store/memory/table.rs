//! One shard's entries, in two tables by the kind of value: an integer (what
//! a limit's GCRA holds, and any counter kept as a bare number) in a 32-byte
//! slot, two to a cache line; any other value in a 64-byte slot of its own
//! line (compact, see `stored.rs`). At 100,000 counted integers the table is
//! 4.2 MB, where 64-byte slots made 8.4 MB, so the one cache miss of a count
//! reaches less memory, and an entry costs half the bytes.
//!
//! A key is in one of the two at most. A lookup tries the integers first; a
//! write whose value changes kind moves the key to the other table.

use hashbrown::HashTable;

use super::key::{low_half, Located};
use super::spare;
use super::stored::Stored;
use crate::{Entry, Millis};

/// A key whose value is an integer.
#[derive(Debug)]
#[repr(align(32))]
pub(super) struct IntSlot {
    /// The key's 128-bit keyed hash; two keys sharing one would need 2^64
    /// tries by someone who knew the store's random key.
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

impl Table {
    /// Entries held, live or expired.
    pub(super) fn len(&self) -> usize {
        self.ints.len() + self.others.len()
    }

    /// The slot of `k`, if it has one.
    #[inline]
    pub(super) fn find_mut(&mut self, k: &Located) -> Option<SlotMut<'_>> {
        if let Some(slot) = self.ints.find_mut(k.hash, |s| s.key == k.key) {
            return Some(SlotMut::Int(slot));
        }
        self.others.find_mut(k.hash, |s| s.key == k.key).map(SlotMut::Other)
    }

    /// The live entry of `k`, rebuilt.
    pub(super) fn get(&self, k: &Located, now: Millis) -> Option<Entry> {
        if let Some(slot) = self.ints.find(k.hash, |s| s.key == k.key) {
            return (slot.expires_at > now).then(|| Entry { value: slot.value.into(), expires_at: slot.expires_at });
        }
        let slot = self.others.find(k.hash, |s| s.key == k.key)?;
        (slot.expires_at > now).then(|| Entry { value: slot.value.value(), expires_at: slot.expires_at })
    }

    /// Holds `value` for `k` until `expires_at`, in place when the key is
    /// held with a value of the same kind; true when `k` was not held.
    pub(super) fn put(&mut self, k: &Located, expires_at: Millis, value: Stored) -> bool {
        match self.find_mut(k) {
            Some(slot) => {
                if let Err(value) = slot.set(expires_at, value) {
                    self.change_kind(k, expires_at, value);
                }
                false
            }
            None => {
                self.insert(k, expires_at, value);
                true
            }
        }
    }

    /// Holds `value` for `k`, which is held in neither table.
    pub(super) fn insert(&mut self, k: &Located, expires_at: Millis, value: Stored) {
        match value {
            Stored::Int(value) => {
                self.ints.insert_unique(k.hash, IntSlot { key: k.key, expires_at, value }, |s| low_half(s.key));
            }
            value => {
                self.others.insert_unique(k.hash, Slot { key: k.key, expires_at, value }, |s| low_half(s.key));
            }
        }
    }

    /// Holds `value` for `k`, whose slot holds a value of the other kind (its
    /// [`set`](SlotMut::set) refused `value`): the key moves to the other table.
    pub(super) fn change_kind(&mut self, k: &Located, expires_at: Millis, value: Stored) {
        let moved = match value {
            Stored::Int(_) => self.others.find_entry(k.hash, |s| s.key == k.key).map(|slot| slot.remove()).is_ok(),
            _ => self.ints.find_entry(k.hash, |s| s.key == k.key).map(|slot| slot.remove()).is_ok(),
        };
        debug_assert!(moved, "a key changes kind from a slot of the other kind");
        self.insert(k, expires_at, value);
    }

    /// Drops the entry of `k`; true if it had one.
    pub(super) fn remove(&mut self, k: &Located) -> bool {
        if let Ok(slot) = self.ints.find_entry(k.hash, |s| s.key == k.key) {
            slot.remove();
            return true;
        }
        if let Ok(slot) = self.others.find_entry(k.hash, |s| s.key == k.key) {
            slot.remove();
            return true;
        }
        false
    }

    /// Drops every entry expired at `now`; the earliest expiry of those
    /// left ([`Millis::MAX`] for none).
    pub(super) fn retain_live(&mut self, now: Millis) -> Millis {
        let mut earliest = Millis::MAX;
        let mut live = |expires_at: Millis| {
            let live = expires_at > now;
            if live {
                earliest = earliest.min(expires_at);
            }
            live
        };
        self.ints.retain(|s| live(s.expires_at));
        self.others.retain(|s| live(s.expires_at));
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
        match self {
            SlotMut::Int(slot) => slot.expires_at > now,
            SlotMut::Other(slot) => slot.expires_at > now,
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
            SlotMut::Int(_) => spare::keep(entry.value),
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
        let read = |store: MemoryStore| async move { store.read(&["limit:part:k"]).await.unwrap()[0].clone() };
        let seen = store.count_number_after(&start, b"k", |n, _| (Some((7, LATER)), n)).unwrap();
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
        assert_eq!(store.len(), 1);
        let seen = store.count_number_after(&start, b"k", |n, _| (Some((8, LATER)), n)).unwrap();
        assert_eq!(seen, None, "an object is no integer to count on");
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!(8)));
        let seen = store.count_number_after(&start, b"k", |n, _| (Some((9, LATER)), n)).unwrap();
        assert_eq!(seen, Some(8));
        assert_eq!(store.len(), 1, "held once, in one table");
        store.update(&["limit:part:k"], &mut |_: &[Option<Entry>], _| vec![Write::Delete]).await.unwrap();
        assert_eq!(read(store.clone()).await, None);
        assert_eq!(store.len(), 0);
    }
}
