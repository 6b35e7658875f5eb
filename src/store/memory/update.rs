//! Updates and reads: the shards of a call's keys locked in order, `apply`
//! run on what they hold, its writes made before the locks go. A one-key
//! count, the usual one, finds its slot once and needs no lists.

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::spare_map;
use super::stored::Stored;
use super::table::{SlotMut, Table};
use super::{Inner, Located};
use crate::bound::{Bound, FamilyId, Short};
use crate::rules::{check_keys, run_apply};
use crate::{Apply, Entry, Millis, StoreError, Write};

/// The keys of one call; most calls name one to four.
type Keys = SmallVec<[Located; 4]>;
/// The entries lent to `apply` by one call.
type Lent = SmallVec<[Option<Entry>; 4]>;
/// What one key's update runs on its entry: its write and its answer.
type OneStep<'a, T> = dyn FnMut(&[Option<Entry>], Millis) -> Result<(Write, T), StoreError> + 'a;

impl Inner {
    /// Locks the shards of `keys` in ascending order, each once.
    fn lock(&self, keys: &[Located]) -> Locks<'_> {
        if let [one] = keys {
            return Locks::One(one.shard, self.shards[one.shard].lock());
        }
        let mut order: SmallVec<[usize; 4]> = keys.iter().map(|k| k.shard).collect();
        order.sort_unstable();
        order.dedup();
        Locks::Many(order.into_iter().map(|s| (s, self.shards[s].lock())).collect())
    }

    pub(super) fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        check_keys(keys)?;
        if let [key] = keys {
            // One key, the usual count: no list of them.
            let mut step = |current: &[Option<Entry>], now: Millis| {
                let writes = run_apply(apply, current, now)?;
                Ok((writes.into_iter().next().unwrap_or(Write::Keep), ()))
            };
            return self.update_one(
                self.keys.locate(key),
                |bound: &Bound| bound.family(key.as_bytes(), b""),
                &mut step,
            );
        }
        let located: Keys = keys.iter().map(|k| self.keys.locate(k)).collect();
        let mut short = Short::Bound;
        if self.try_update(&located, keys, apply, &mut short)?.is_some() {
            return Ok(());
        }
        // No room: make it from expired entries only, then try once more.
        if self.make_room(&located, short) && self.try_update(&located, keys, apply, &mut short)?.is_some() {
            return Ok(());
        }
        Err(self.full(short))
    }

    /// The key at `k` counted by this crate's own `step` on its value as one
    /// integer and its expiry (`None`: no live entry, or one holding anything
    /// else). `step` gives the integer to hold and when it expires, or
    /// nothing to write, and an answer: no JSON at all. The caller checked the key, and
    /// `family` gives its family, as for [`count_one`](Self::count_one).
    pub(super) fn count_number<T>(
        &self,
        k: Located,
        family: impl Fn(&Bound) -> FamilyId,
        mut step: impl FnMut(Option<(i64, Millis)>, Millis) -> (Option<(i64, Millis)>, T),
    ) -> Result<T, StoreError> {
        self.at_slot(k, &family, &mut |slot: Option<SlotMut<'_>>, now: Millis| {
            let held = slot.and_then(|s| Some((s.as_i64()?, s.expires_at())));
            let (write, answer) = step(held, now);
            let write = match write {
                Some((value, expires_at)) if expires_at > now => {
                    SlotWrite::Put { value: Stored::number(value), expires_at }
                }
                // Expired as it is written: a delete, as `run_apply` makes it.
                Some(_) => SlotWrite::Delete,
                None => SlotWrite::Keep,
            };
            Ok((write, answer))
        })
    }

    /// `step` run on the entries of one key, lent from its slot.
    fn update_one<T>(
        &self,
        k: Located,
        family: impl Fn(&Bound) -> FamilyId,
        step: &mut OneStep<'_, T>,
    ) -> Result<T, StoreError> {
        self.at_slot(k, &family, &mut |slot: Option<SlotMut<'_>>, now: Millis| lend_to(step, slot, now))
    }

    /// [`try_at_slot`](Self::try_at_slot), and once more after making room
    /// when the store is full: from one call site, so that the attempt is
    /// inlined into the count.
    #[inline]
    fn at_slot<T, S>(&self, k: Located, family: &impl Fn(&Bound) -> FamilyId, step: &mut S) -> Result<T, StoreError>
    where
        S: FnMut(Option<SlotMut<'_>>, Millis) -> Result<(SlotWrite, T), StoreError>,
    {
        let mut short = Short::Bound;
        let mut made_room = false;
        loop {
            if let Some(answer) = self.try_at_slot(k, family, step, &mut short)? {
                return Ok(answer);
            }
            if made_room || !self.make_room(&[k], short) {
                return Err(self.full(short));
            }
            made_room = true;
        }
    }

    /// One atomic attempt on `keys`, whose text is `texts`. `Ok(None)`: the
    /// writes needed new entries and found no room (`short` says why);
    /// nothing was written.
    fn try_update(
        &self,
        keys: &[Located],
        texts: &[&str],
        apply: &mut Apply<'_>,
        short: &mut Short,
    ) -> Result<Option<()>, StoreError> {
        let now = self.clock.now();
        let mut locks = self.lock(keys);
        // Lend each live entry to `apply` without cloning it; bit i of `held`
        // says whether key i has a slot at all (live, or expired, not yet dropped).
        let mut current: Lent = SmallVec::with_capacity(keys.len());
        let mut held: u64 = 0;
        for (i, k) in keys.iter().enumerate() {
            let slot = locks.table(k.shard).find_mut(k);
            if slot.is_some() {
                held |= 1 << i;
            }
            current.push(slot.filter(|s| s.is_live(now)).map(|mut s| s.lend()));
        }
        let writes = match run_apply(apply, &current, now) {
            Ok(writes) => writes,
            Err(e) => {
                give_back(&mut locks, keys, current);
                return Err(e);
            }
        };
        // The family of each write that needs a new entry.
        let new: SmallVec<[Option<FamilyId>; 4]> = texts
            .iter()
            .zip(&writes)
            .enumerate()
            .map(|(i, (text, w))| {
                let new = matches!(w, Write::Put(_)) && held & (1 << i) == 0;
                new.then(|| self.bound.family(text.as_bytes(), b""))
            })
            .collect();
        if let Err(no_room) = self.reserve_new(new.iter().flatten().copied(), now) {
            give_back(&mut locks, keys, current);
            *short = no_room;
            return Ok(None);
        }
        let mut removed: SmallVec<[FamilyId; 4]> = SmallVec::new();
        for (((k, write), lent), new) in keys.iter().zip(writes).zip(current).zip(new) {
            let table = locks.table(k.shard);
            match write {
                Write::Put(entry) => {
                    self.note_expiry(k.shard, entry.expires_at);
                    let value = Stored::new(entry.value);
                    match new {
                        Some(family) => table.insert(k, family, entry.expires_at, value),
                        None => table.set(k, entry.expires_at, value),
                    }
                    if let Some(entry) = lent {
                        spare_map::keep(entry.value);
                    }
                }
                Write::Keep => match lent {
                    Some(entry) => {
                        if let Some(mut slot) = table.find_mut(k) {
                            slot.put_back(entry);
                        }
                    }
                    // Lazy expiry: an expired entry that `apply` kept goes now.
                    None => removed.extend(table.remove(k)),
                },
                Write::Delete => removed.extend(table.remove(k)),
            }
        }
        drop(locks);
        for family in removed {
            self.bound.release_in(family, 1);
        }
        Ok(Some(()))
    }

    /// [`try_update`](Self::try_update) of one key, the usual count: the slot
    /// is found once, lent to `step` while its entry is live, and written
    /// through the same handle, with no lists. `Ok(None)`: the write needed a
    /// new entry, of `family`'s, and found no room (`short` says why);
    /// nothing was written.
    #[inline]
    fn try_at_slot<T, S>(
        &self,
        k: Located,
        family: &impl Fn(&Bound) -> FamilyId,
        step: &mut S,
        short: &mut Short,
    ) -> Result<Option<T>, StoreError>
    where
        S: FnMut(Option<SlotMut<'_>>, Millis) -> Result<(SlotWrite, T), StoreError>,
    {
        let now = self.clock.now();
        let mut table = self.shards[k.shard].lock();
        let Some(mut slot) = table.find_mut(&k) else {
            let (write, answer) = step(None, now)?;
            if let SlotWrite::Put { value, expires_at } = write {
                let family = family(&self.bound);
                if let Err(no_room) = self.reserve_new(std::iter::once(family), now) {
                    *short = no_room;
                    return Ok(None);
                }
                self.note_expiry(k.shard, expires_at);
                table.insert(&k, family, expires_at, value);
            }
            return Ok(Some(answer));
        };
        let was = slot.expires_at();
        let live = was > now;
        let (write, answer) = step(if live { Some(slot.reborrow()) } else { None }, now)?;
        match write {
            SlotWrite::Put { value, expires_at } => {
                if expires_at < was {
                    // Sooner than the entry it replaces, so maybe than any in the shard.
                    self.note_expiry(k.shard, expires_at);
                }
                if let Err(value) = slot.set(expires_at, value) {
                    table.change_kind(&k, expires_at, value);
                }
            }
            SlotWrite::Keep if live => {}
            // Deleted, or an expired entry that `step` kept (lazy expiry).
            _ => {
                let removed = table.remove(&k);
                drop(table);
                if let Some(family) = removed {
                    self.bound.release_in(family, 1);
                }
            }
        }
        Ok(Some(answer))
    }

    pub(super) fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        check_keys(keys)?;
        let located: Keys = keys.iter().map(|k| self.keys.locate(k)).collect();
        let now = self.clock.now();
        let mut locks = self.lock(&located);
        Ok(located.iter().map(|k| locks.table(k.shard).get(k, now)).collect())
    }
}

/// What a one-key step does to its key's slot.
enum SlotWrite {
    /// Leaves a live entry as it is; an expired one goes (lazy expiry).
    Keep,
    Delete,
    Put {
        value: Stored,
        expires_at: Millis,
    },
}

impl From<Write> for SlotWrite {
    fn from(write: Write) -> Self {
        match write {
            Write::Keep => SlotWrite::Keep,
            Write::Delete => SlotWrite::Delete,
            Write::Put(entry) => SlotWrite::Put { value: Stored::new(entry.value), expires_at: entry.expires_at },
        }
    }
}

/// `step` run on the live entry of `slot` (if any), lent and not cloned: put
/// back when `step` keeps it or fails.
fn lend_to<T>(step: &mut OneStep<'_, T>, slot: Option<SlotMut<'_>>, now: Millis) -> Result<(SlotWrite, T), StoreError> {
    let Some(mut slot) = slot else {
        return step(&[None], now).map(|(write, answer)| (write.into(), answer));
    };
    let mut current = [Some(slot.lend())];
    let done = step(&current, now);
    let lent = current[0].take();
    match done {
        Ok((Write::Keep, _)) | Err(_) => {
            if let Some(entry) = lent {
                slot.put_back(entry);
            }
            done.map(|(_, answer)| (SlotWrite::Keep, answer))
        }
        Ok((write, answer)) => {
            let write = write.into();
            if let Some(entry) = lent {
                spare_map::keep(entry.value);
            }
            Ok((write, answer))
        }
    }
}

/// Puts lent entries back after an update that writes nothing.
fn give_back(locks: &mut Locks<'_>, keys: &[Located], lent: Lent) {
    for (k, entry) in keys.iter().zip(lent) {
        if let Some(entry) = entry {
            if let Some(mut slot) = locks.table(k.shard).find_mut(k) {
                slot.put_back(entry);
            }
        }
    }
}

/// The shard locks one call holds.
enum Locks<'a> {
    One(usize, MutexGuard<'a, Table>),
    Many(SmallVec<[(usize, MutexGuard<'a, Table>); 4]>),
}

impl Locks<'_> {
    fn table(&mut self, shard: usize) -> &mut Table {
        match self {
            Locks::One(s, guard) => {
                debug_assert_eq!(*s, shard);
                guard
            }
            Locks::Many(guards) => {
                let i = guards.binary_search_by_key(&shard, |(s, _)| *s).expect("every key's shard is locked");
                &mut guards[i].1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::{LimitStore, MemoryStore};

    const LATER: i64 = i64::MAX / 2;

    /// An integer count, as the store's counter makes it: the key is the
    /// prefix followed by the rest (the store finds it under that name), the
    /// step sees the integer and its expiry, and a key the rules refuse is
    /// refused as `update` refuses it, writing nothing.
    #[tokio::test]
    async fn an_integer_count_is_found_under_its_whole_key() {
        let store = MemoryStore::new();
        let start = store.key_start("limit:part:");
        let count = |rest: &str, n: i64, expires_at: Option<i64>| {
            store.count_number_after(&start, rest.as_bytes(), |held, now| (Some((n, expires_at.unwrap_or(now))), held))
        };
        let mut seen = Vec::new();
        for n in [1, 2] {
            seen.push(count("k", n, Some(LATER)).unwrap());
        }
        assert_eq!(seen, [None, Some((1, LATER))]);
        let read = |store: MemoryStore| async move { store.read(&["limit:part:k"]).await.unwrap()[0].clone() };
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!(2)), "found under its whole name");
        let long = "k".repeat(crate::MAX_KEY_BYTES);
        let refused = count(&long, 3, Some(LATER)).unwrap_err();
        assert!(matches!(refused.refusal(), Some(crate::error::RefusedInput::KeyTooLong { .. })));
        count("k", 4, None).unwrap();
        assert_eq!(read(store.clone()).await, None, "an entry expired as it is written is a delete");
        assert_eq!(store.inner.bound.held(), 0);
    }
}
