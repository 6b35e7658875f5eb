//! Updates and reads: the shards of a call's keys locked in order, `apply`
//! run on what they hold, its writes made before the locks go. A one-key
//! count, the usual one, finds its slot once and needs no lists.

use parking_lot::MutexGuard;
use smallvec::SmallVec;

use super::spare;
use super::stored::Stored;
use super::table::{SlotMut, Table};
use super::{Inner, Located};
use crate::error::Unavailable;
use crate::rules::{check_keys, run_apply, run_step};
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
            return self.update_one(self.keys.locate(key), &mut step);
        }
        let located: Keys = keys.iter().map(|k| self.keys.locate(k)).collect();
        if self.try_update(&located, apply)?.is_some() {
            return Ok(());
        }
        // Full: make room from expired entries only, then try once more.
        if self.make_room(&located) && self.try_update(&located, apply)?.is_some() {
            return Ok(());
        }
        Err(self.full())
    }

    /// The key at `k` counted by this crate's own `step`, which gives its
    /// write and an answer: [`update`](Self::update) of one key with no list,
    /// no `dyn` and no JSON round trip beyond the entry's own. The caller
    /// checked the key.
    pub(super) fn count_one<T>(
        &self,
        k: Located,
        mut step: impl FnMut(Option<&Entry>, Millis) -> (Write, T),
    ) -> Result<T, StoreError> {
        self.update_one(k, &mut |current: &[Option<Entry>], now: Millis| {
            run_step(&mut step, current.first().and_then(Option::as_ref), now)
        })
    }

    /// The key at `k` counted by this crate's own `step` on its value as one
    /// integer (`None`: no live entry, or one holding anything else). `step`
    /// gives the integer to hold and when it expires, or nothing to write,
    /// and an answer: no JSON at all. The caller checked the key.
    pub(super) fn count_number<T>(
        &self,
        k: Located,
        mut step: impl FnMut(Option<i64>, Millis) -> (Option<(i64, Millis)>, T),
    ) -> Result<T, StoreError> {
        self.at_slot(k, &mut |slot: Option<SlotMut<'_>>, now: Millis| {
            let (write, answer) = step(slot.and_then(|s| s.as_i64()), now);
            let write = match write {
                Some((value, expires_at)) if expires_at > now => {
                    SlotWrite::Put { value: Stored::number(value), expires_at }
                }
                // Expired as it is written: a delete, as `run_step` makes it.
                Some(_) => SlotWrite::Delete,
                None => SlotWrite::Keep,
            };
            Ok((write, answer))
        })
    }

    /// `step` run on the entries of one key, lent from its slot.
    fn update_one<T>(&self, k: Located, step: &mut OneStep<'_, T>) -> Result<T, StoreError> {
        self.at_slot(k, &mut |slot: Option<SlotMut<'_>>, now: Millis| lend_to(step, slot, now))
    }

    /// [`try_at_slot`](Self::try_at_slot), and once more after making room
    /// when the store is full: from one call site, so that the attempt is
    /// inlined into the count.
    #[inline]
    fn at_slot<T, S>(&self, k: Located, step: &mut S) -> Result<T, StoreError>
    where
        S: FnMut(Option<SlotMut<'_>>, Millis) -> Result<(SlotWrite, T), StoreError>,
    {
        let mut made_room = false;
        loop {
            if let Some(answer) = self.try_at_slot(k, step)? {
                return Ok(answer);
            }
            if made_room || !self.make_room(&[k]) {
                return Err(self.full());
            }
            made_room = true;
        }
    }

    /// The answer of a store at its bound, noted and logged.
    #[cold]
    fn full(&self) -> StoreError {
        self.bound.note_full("memory");
        StoreError::unavailable(
            Unavailable::Full,
            format!("the memory store holds its bound of {} live entries", self.bound.max()),
        )
    }

    /// One atomic attempt. `Ok(None)`: the writes needed new entries and the
    /// store is full; nothing was written.
    fn try_update(&self, keys: &[Located], apply: &mut Apply<'_>) -> Result<Option<()>, StoreError> {
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
        let new_entries =
            writes.iter().enumerate().filter(|(i, w)| matches!(w, Write::Put(_)) && held & (1 << i) == 0).count();
        if !self.reserve_new(new_entries as u64, now) {
            give_back(&mut locks, keys, current);
            return Ok(None);
        }
        let mut removed = 0u64;
        for ((k, write), lent) in keys.iter().zip(writes).zip(current) {
            let table = locks.table(k.shard);
            match write {
                Write::Put(entry) => {
                    self.note_expiry(k.shard, entry.expires_at);
                    table.put(k, entry.expires_at, Stored::new(entry.value));
                    if let Some(entry) = lent {
                        spare::keep(entry.value);
                    }
                }
                Write::Keep => match lent {
                    Some(entry) => {
                        if let Some(mut slot) = table.find_mut(k) {
                            slot.put_back(entry);
                        }
                    }
                    // Lazy expiry: an expired entry that `apply` kept goes now.
                    None => removed += u64::from(table.remove(k)),
                },
                Write::Delete => removed += u64::from(table.remove(k)),
            }
        }
        drop(locks);
        self.bound.release(removed);
        Ok(Some(()))
    }

    /// [`try_update`](Self::try_update) of one key, the usual count: the slot
    /// is found once, lent to `step` while its entry is live, and written
    /// through the same handle, with no lists. `Ok(None)`: the write needed a
    /// new entry and the store is full; nothing was written.
    #[inline]
    fn try_at_slot<T, S>(&self, k: Located, step: &mut S) -> Result<Option<T>, StoreError>
    where
        S: FnMut(Option<SlotMut<'_>>, Millis) -> Result<(SlotWrite, T), StoreError>,
    {
        let now = self.clock.now();
        let mut table = self.shards[k.shard].lock();
        let Some(mut slot) = table.find_mut(&k) else {
            let (write, answer) = step(None, now)?;
            if let SlotWrite::Put { value, expires_at } = write {
                if !self.reserve_new(1, now) {
                    return Ok(None);
                }
                self.note_expiry(k.shard, expires_at);
                table.insert(&k, expires_at, value);
            }
            return Ok(Some(answer));
        };
        let live = slot.is_live(now);
        let (write, answer) = step(if live { Some(slot.reborrow()) } else { None }, now)?;
        match write {
            SlotWrite::Put { value, expires_at } => {
                self.note_expiry(k.shard, expires_at);
                if let Err(value) = slot.set(expires_at, value) {
                    table.change_kind(&k, expires_at, value);
                }
            }
            SlotWrite::Keep if live => {}
            // Deleted, or an expired entry that `step` kept (lazy expiry).
            _ => {
                table.remove(&k);
                drop(table);
                self.bound.release(1);
            }
        }
        Ok(Some(answer))
    }

    /// Reserves room for `n` new entries (false when the bound has none), and
    /// near the bound warns or wakes the sweeper.
    fn reserve_new(&self, n: u64, now: Millis) -> bool {
        if !self.bound.try_reserve(n) {
            return false;
        }
        if n > 0 && u128::from(self.bound.held()) * 5 >= u128::from(self.bound.max()) * 4 {
            // Near the bound. If nothing can have expired, what is held is
            // live: warn. Else the sweeper removes what expired first, and
            // warns if what is left is still this full.
            if self.sweeper.get().is_none() || !self.may_hold_any_expired(now) {
                self.bound.note_fill();
            } else {
                self.wake.notify_one();
            }
        }
        true
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
                spare::keep(entry.value);
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

    use crate::{Entry, LimitStore, MemoryStore, Write};

    const LATER: i64 = i64::MAX / 2;

    /// The one-key count of the crate's own steps: the key is the start's
    /// text followed by the rest (the store finds it under that name), an
    /// answer comes back with the write, a panic is a refusal that leaves the
    /// entry as it was, and a write or a key the rules refuse is refused as
    /// `update` refuses it.
    #[tokio::test]
    async fn a_step_writes_answers_and_fails_cleanly() {
        let store = MemoryStore::new();
        let start = store.key_start("limit:part:");
        let put = |n: i64| Write::Put(Entry { value: json!(n), expires_at: LATER });
        let seen = store.count_one_after(&start, b"k", |entry, _| (put(1), entry.is_none())).unwrap();
        assert!(seen, "the key was new");
        let read = |store: MemoryStore| async move { store.read(&["limit:part:k"]).await.unwrap()[0].clone() };
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!(1)), "found under its whole name");
        let seen = store.count_one_after(&start, b"k", |entry, _| (put(2), entry.map(|e| e.value.clone()))).unwrap();
        assert_eq!(seen, Some(json!(1)));
        let panicked = store.count_one_after(&start, b"k", |_, _| -> (Write, ()) { panic!("a step that panics") });
        assert!(panicked.unwrap_err().refusal().is_some());
        let huge = Write::Put(Entry { value: json!("x".repeat(5_000)), expires_at: LATER });
        assert!(store.count_one_after(&start, b"k", |_, _| (huge.clone(), ())).unwrap_err().refusal().is_some());
        let long = "k".repeat(crate::MAX_KEY_BYTES);
        let refused = store.count_one_after(&start, long.as_bytes(), |_, _| (put(3), ())).unwrap_err();
        assert!(matches!(refused.refusal(), Some(crate::error::Refusal::KeyTooLong { .. })));
        assert_eq!(read(store.clone()).await.map(|e| e.value), Some(json!(2)), "nothing was lost or half-written");
    }
}
