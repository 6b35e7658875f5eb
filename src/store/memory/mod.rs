//! `MemoryStore`: the default store, in this process's memory.
//!
//! Built for the hot path: keys are spread over 64 shards, each behind its own
//! lock, so a count takes one uncontended lock and no global one. An update on
//! several keys locks their shards in ascending order (so two updates can never
//! wait on each other in a cycle) and holds them all while `apply` runs, which
//! makes it atomic across the keys for writers and readers alike.
//!
//! Keys are held as their 128-bit SipHash-1-3 under a random per-store key (`hashed_key.rs`):
//! fixed-size, compared in place (no pointer to chase on a lookup), never held
//! in the clear, and a flood of long keys costs no more than short ones.
//!
//! Values are held compactly: an integer as itself in a 32-byte slot, two to a
//! cache line (`table.rs`); anything else in a 64-byte slot (`stored.rs`), a
//! small object or array as its JSON text inline, so a `{"n": 3}` costs no
//! `BTreeMap` node; `apply` gets the value rebuilt, into an object the thread
//! kept from an earlier count when its keys are the same (`spare_map.rs`).
//!
//! Expired entries are dropped lazily when an update meets them, by `sweep`,
//! and by a background sweeper (every minute, and sooner near the bound).
//! The bound is kept exactly with one atomic counter, and one per family of
//! keys (the text before a key's first `:`, kept in the top bits of its slot's
//! hash), touched only when an entry is added or removed, never when an
//! existing key counts; past 80% of the bound each family adds new keys only
//! within its share (`crate::bound`). A full store, or a full share, makes
//! room on the request path only from a few shards (`room.rs`); the sweeper
//! does the rest.

mod hashed_key;
mod int_text;
mod room;
mod sip;
mod spare_map;
mod stored;
mod sweeper;
mod table;
mod update;

use hashed_key::{located_after, KeyHasher, KeyStart, Located, SHARDS};
use table::Table;

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use crate::bound::{Bound, PerFamily};
use crate::clock::{Clock, SteadyClock};
use crate::{Apply, Entry, GcraCounted, GcraStep, IntegerCounter, IntegerCounts, LimitStore, Millis, StoreError};

/// The default bound of a memory store.
const DEFAULT_MAX_ENTRIES: u64 = 100_000;

/// Counts in this process's memory. Cheap to clone: clones share the entries.
///
/// Expired entries go when an update meets them, at [`sweep`](LimitStore::sweep),
/// and by a background sweeper that runs every minute (sooner near the bound)
/// when the store is made inside a tokio runtime. [`stats`](LimitStore::stats)
/// tells the entries held, the bound and the sweeps.
///
/// `shared()` is false: on several instances, every budget is multiplied by
/// their number (say so with `single_instance` when you run one).
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

/// Shows the fill, never the entries or the random key they are held under.
impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("held", &self.inner.bound.held())
            .field("max_entries", &self.inner.bound.max())
            .finish()
    }
}

struct Inner {
    shards: Box<[CachePadded<Mutex<Table>>]>,
    /// Hashes keys under the store's random SipHash key.
    keys: KeyHasher,
    bound: Bound,
    clock: StoreClock,
    /// Per shard, at or before the earliest `expires_at` it holds: while `now`
    /// is below it none of its entries has expired, so a full store sweeps only
    /// the shards that have something to remove. Written only under the
    /// shard's lock (lowered by a write, set exact by a sweep of the shard), so
    /// no write racing a sweep can lose its expiry; read without it.
    earliest_expiry: Box<[AtomicI64; SHARDS]>,
    /// The next shard a full store's request sweeps.
    next_shard: AtomicUsize,
    /// Asks the background sweeper to run now.
    wake: Arc<tokio::sync::Notify>,
    sweeper: OnceLock<tokio::task::AbortHandle>,
    /// Full sweeps run, and entries any sweep removed.
    sweeps: AtomicU64,
    swept: AtomicU64,
}

/// The clock a store judges expiry by: the process's [`SteadyClock`], read
/// inline (a store's own, the usual one), or any other through its `dyn Clock`.
enum StoreClock {
    Steady(SteadyClock),
    Any(Arc<dyn Clock>),
}

impl StoreClock {
    #[inline]
    fn now(&self) -> Millis {
        match self {
            StoreClock::Steady(clock) => clock.now(),
            StoreClock::Any(clock) => clock.now(),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(sweeper) = self.sweeper.get() {
            sweeper.abort();
        }
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store bounded at 100,000 live entries, on the process's steady clock (the wall clock's time, read without a call into the OS).
    pub fn new() -> Self {
        Self::with_max_entries(DEFAULT_MAX_ENTRIES)
    }

    /// A store bounded at `max_entries` live entries, on the process's steady clock (the wall clock's time, read without a call into the OS).
    pub fn with_max_entries(max_entries: u64) -> Self {
        Self::on(max_entries, StoreClock::Steady(SteadyClock::new()))
    }

    /// A store bounded at `max_entries` that judges expiry by `clock` (tests use
    /// a [`ManualClock`](crate::clock::ManualClock)). Made inside a tokio
    /// runtime, it sweeps in the background on it.
    pub fn with_clock(max_entries: u64, clock: Arc<dyn Clock>) -> Self {
        Self::on(max_entries, StoreClock::Any(clock))
    }

    /// A store bounded at `max_entries` on `clock`.
    fn on(max_entries: u64, clock: StoreClock) -> Self {
        let shards = (0..SHARDS).map(|_| CachePadded::new(Mutex::new(Table::default()))).collect();
        let inner = Arc::new(Inner {
            shards,
            keys: KeyHasher::random(),
            // Warned on live entries only: see `try_update`.
            bound: Bound::quiet(max_entries),
            clock,
            earliest_expiry: Box::new(std::array::from_fn(|_| AtomicI64::new(Millis::MAX))),
            next_shard: AtomicUsize::new(0),
            wake: Arc::new(tokio::sync::Notify::new()),
            sweeper: OnceLock::new(),
            sweeps: AtomicU64::new(0),
            swept: AtomicU64::new(0),
        });
        if let Some(sweeper) = sweeper::spawn(Arc::downgrade(&inner), inner.wake.clone()) {
            let _ = inner.sweeper.set(sweeper);
        }
        MemoryStore { inner }
    }

    /// The fixed start of keys that [`count_number_after`](Self::count_number_after)
    /// goes on from, hashed once; valid for this store only.
    fn key_start(&self, start: &str) -> KeyStart {
        let family = start.contains(':').then(|| self.inner.bound.family(start.as_bytes(), b""));
        self.inner.keys.key_start(start, family)
    }

    /// One key, `start` followed by `rest`, counted by a `step` on its
    /// value as one integer and its expiry (`None`: no live entry, or one
    /// holding anything else), which gives the integer to hold and when it
    /// expires (or nothing to write) and an answer: no JSON is rebuilt,
    /// parsed or checked. The store's [`IntegerCounter`] counts so.
    fn count_number_after<T>(
        &self,
        start: &KeyStart,
        rest: &[u8],
        step: impl FnMut(Option<(i64, Millis)>, Millis) -> (Option<(i64, Millis)>, T),
    ) -> Result<T, StoreError> {
        let family = |bound: &Bound| start.family(rest, bound);
        self.inner.count_number(located_after(start, rest)?, family, step)
    }
}

impl Inner {
    /// Notes a write of `expires_at` in `shard`, whose lock the caller holds.
    #[inline]
    fn note_expiry(&self, shard: usize, expires_at: Millis) {
        let earliest = &self.earliest_expiry[shard % SHARDS];
        if expires_at < earliest.load(Ordering::Relaxed) {
            earliest.store(expires_at, Ordering::Relaxed);
        }
    }

    /// Removes every expired entry, shard by shard.
    fn sweep(&self, now: Millis) -> u64 {
        self.sweeps.fetch_add(1, Ordering::Relaxed);
        (0..SHARDS).map(|shard| self.sweep_shard(shard, now)).sum()
    }

    /// Removes the expired entries of one shard, and sets its earliest expiry
    /// to that of the entries left, under its lock.
    fn sweep_shard(&self, shard: usize, now: Millis) -> u64 {
        let mut table = self.shards[shard].lock();
        let before = table.len();
        let mut removed = PerFamily::new();
        let earliest = table.retain_live(now, &mut removed);
        self.earliest_expiry[shard % SHARDS].store(earliest, Ordering::Relaxed);
        let gone = (before - table.len()) as u64;
        drop(table);
        self.bound.release_each(&removed);
        self.swept.fetch_add(gone, Ordering::Relaxed);
        gone
    }
}

#[async_trait::async_trait]
impl LimitStore for MemoryStore {
    fn shared(&self) -> bool {
        false
    }

    /// Every call takes only short locks, and never awaits.
    fn answers_at_once(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        let inner = &self.inner;
        let (sweeps, swept) = (inner.sweeps.load(Ordering::Relaxed), inner.swept.load(Ordering::Relaxed));
        Some(crate::StoreStats::new(inner.bound.held(), inner.bound.max(), sweeps, swept))
    }

    fn update_now(&self, keys: &[&str], apply: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
        Some(self.inner.update(keys, apply))
    }

    fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
        Some(self)
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.inner.update(keys, apply)
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.inner.read(keys)
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        let now = self.inner.clock.now();
        Ok(self.inner.sweep(now))
    }
}

/// Each counter holds its prefix hashed once: a count hashes only the rest.
impl IntegerCounts for MemoryStore {
    fn counter(&self, prefix: &str) -> Option<Box<dyn IntegerCounter>> {
        Some(Box::new(PrefixCounter { start: self.key_start(prefix), store: self.clone() }))
    }
}

/// The memory store's [`IntegerCounter`]: its prefix, hashed.
struct PrefixCounter {
    store: MemoryStore,
    start: KeyStart,
}

impl IntegerCounter for PrefixCounter {
    fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        self.store.count_number_after(&self.start, rest.as_bytes(), |held, now| step.run(held, now))
    }
}
