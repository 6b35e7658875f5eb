//! The store contract: what every limit store does, and the one helper built on it.
//!
//! A limit store only does atomic read-modify-write over a few keys. Everything a
//! rate limit decides happens inside the caller's `apply`, which sees the live
//! entries and the store's own clock.

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod database;
pub mod memory;

use crate::StoreError;

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
    store
        .update(keys, &mut |current: &[Option<Entry>], now: Millis| {
            let (writes, out) = apply(current, now);
            last = Some(out);
            writes
        })
        .await?;
    last.ok_or_else(|| StoreError::Unavailable {
        reason: crate::error::Unavailable::StoreFailed,
        detail: "the store finished the update without calling apply".into(),
        source: None,
    })
}
