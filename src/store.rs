//! The store contract: what every limit store does, and the one helper built on it.
//!
//! A limit store only does atomic read-modify-write over a few keys. Everything a
//! rate limit decides happens inside the caller's `apply`, which sees the live
//! entries and the store's own clock.

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod database;
mod integer_counts;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

use crate::StoreError;

pub use integer_counts::{AsyncIntegerCounter, GcraCounted, GcraStep, IntegerCounter, IntegerCounts};

/// Milliseconds since the Unix epoch, on the store's own clock.
pub type Millis = i64;

/// One key's stored value and when it stops being live.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    /// JSON, at most [`MAX_VALUE_BYTES`](crate::MAX_VALUE_BYTES) bytes serialized.
    pub value: serde_json::Value,
    /// On the store's clock: the entry is live while `now < expires_at`.
    pub expires_at: Millis,
}

/// What `apply` wants done with one key.
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Leave the key as it is (live, expired or absent).
    Keep,
    /// Store this entry; one that is already expired is a delete.
    Put(Entry),
    /// Remove the key.
    Delete,
}

/// Sees the live entries for the keys (None: no live entry) and the store's clock.
/// Returns one `Write` per key, in the order of the keys. Pure and synchronous:
/// it may run more than once when a store retries.
pub type Apply<'a> = dyn FnMut(&[Option<Entry>], Millis) -> Vec<Write> + Send + 'a;

/// An [`Apply`] that owns what it uses, so a store may take it along: see
/// [`LimitStore::update_owned`].
pub type OwnedApply = dyn FnMut(&[Option<Entry>], Millis) -> Vec<Write> + Send + 'static;

/// Where limits keep their counts. Implement it for your own backend and run
/// [`testing::contract`](crate::testing) against two handles on it.
#[async_trait::async_trait]
pub trait LimitStore: Send + Sync {
    /// True when every instance of the site sees the same entries.
    fn shared(&self) -> bool;
    /// Atomically: read the live entries for `keys`, call `apply` with them and the
    /// store's clock, and write what it returns, with no other update to these keys
    /// in between.
    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError>;
    /// The live entries for `keys`, judged on the store's own clock.
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError>;
    /// Remove expired entries; answer how many went.
    async fn sweep(&self) -> Result<u64, StoreError>;

    /// [`update`](Self::update) with an `apply` that the store may keep: a
    /// store that runs its call elsewhere (a [`Guarded`](crate::Guarded) whose
    /// call outlives its caller, SQLite's writer thread) takes it along,
    /// instead of asking the caller for each answer. Stores need not
    /// implement it. [`Limits`](crate::Limits) counts through it.
    async fn update_owned(&self, keys: &[&str], mut apply: Box<OwnedApply>) -> Result<(), StoreError> {
        self.update(keys, &mut *apply).await
    }

    /// True when every call finishes on its first poll, never waiting on I/O
    /// or a lock (the memory store). A [`Guarded`](crate::Guarded) then runs
    /// the call in the caller's task with the caller's own `apply`, and spawns
    /// nothing. Leave it `false` when in doubt: that is always correct.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// [`update`](Self::update) run here and now, with no future, by a store
    /// that [answers at once](Self::answers_at_once); `None` (the default)
    /// when the store has no such path, and callers then use `update`. It
    /// spares the hot path a boxed future per call and per wrapper.
    fn update_now(&self, keys: &[&str], apply: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
        let _ = (keys, apply);
        None
    }

    /// The store's [integer counts](IntegerCounts), when it offers them: a
    /// count whose state is one integer (a GCRA's), with no JSON: here and
    /// now on a store that [answers at once](Self::answers_at_once), through
    /// a future on one that waits. `None` (the default): every count goes
    /// through [`update`](Self::update). See [`IntegerCounts`] for which
    /// stores should offer them.
    fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
        None
    }

    /// True for a store that already puts the deadline and the in-flight cap
    /// on its calls ([`Guarded`](crate::Guarded)), so that it is not guarded twice.
    fn is_guarded(&self) -> bool {
        false
    }

    /// What the store can say of its fill and its sweeps, without a call to
    /// the server (for metrics and `stats`); `None` when it keeps no count.
    fn stats(&self) -> Option<StoreStats> {
        None
    }
}

/// A store's fill and sweeps, from [`LimitStore::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreStats {
    /// Entries the bound counts now, without a scan. The database store's
    /// is an estimate: exact at start and after each sweep or refresh, plus
    /// what this instance added and removed since (entries that expired,
    /// and other instances' adds, are seen at the next refresh).
    pub held: u64,
    /// The bound.
    pub max_entries: u64,
    /// Sweeps run since the store was made.
    pub sweeps: u64,
    /// Expired entries those sweeps removed.
    pub swept: u64,
}

impl StoreStats {
    /// A store's stats.
    pub fn new(held: u64, max_entries: u64, sweeps: u64, swept: u64) -> Self {
        StoreStats { held, max_entries, sweeps, swept }
    }
}

/// Runs `apply` through [`LimitStore::update`] and hands back what its last run
/// returned beside the writes: the way to get a decision out of an update.
///
/// `apply` may run more than once when a store retries; only the last run's
/// result is kept, matching the writes that were stored.
pub async fn update_with<S, T, F>(store: &S, keys: &[&str], mut apply: F) -> Result<T, StoreError>
where
    S: LimitStore + ?Sized,
    T: Send,
    F: FnMut(&[Option<Entry>], Millis) -> (Vec<Write>, T) + Send,
{
    let mut last = None;
    let mut keep = |current: &[Option<Entry>], now: Millis| {
        let (writes, out) = apply(current, now);
        last = Some(out);
        writes
    };
    match store.update_now(keys, &mut keep) {
        Some(done) => done?,
        None => store.update(keys, &mut keep).await?,
    }
    last.ok_or_else(no_apply_run)
}

/// A store that answered an update without running its `apply`.
pub(crate) fn no_apply_run() -> StoreError {
    StoreError::Unavailable {
        reason: crate::error::Unavailable::StoreFailed,
        detail: "the store finished the update without calling apply".into(),
        source: None,
    }
}
