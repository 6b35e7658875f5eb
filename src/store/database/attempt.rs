//! How one count runs on any backend: a single key first tries the backend's
//! optimistic path (if it has one), then the locked transaction runs, retried
//! on deadlocks. Backends only say how to do each attempt in their SQL.

use super::error::{is_retryable, settle, Failure};
use super::row::{Decide, KeyHash};
use crate::StoreError;

/// One backend's attempts at a count.
pub(super) trait Attempts {
    /// One locked transaction over the rows of `hashes`.
    async fn locked(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure>;

    /// One optimistic try on a single key: `Some(Ok(true))` when it wrote,
    /// `Some(Ok(false))` when the row changed under it (nothing written);
    /// `None` for a backend without such a path.
    async fn optimistic(
        &self,
        _hash: &KeyHash,
        _generation: i64,
        _decide: &mut Decide<'_>,
    ) -> Option<Result<bool, Failure>> {
        None
    }
}

/// Runs one count on `backend`.
pub(super) async fn count<B: Attempts>(
    backend: &B,
    hashes: &[KeyHash],
    generation: i64,
    decide: &mut Decide<'_>,
) -> Result<(), StoreError> {
    if let [hash] = hashes {
        match backend.optimistic(hash, generation, decide).await {
            Some(Ok(true)) => return Ok(()),
            Some(Ok(false)) | None => {} // the row changed under us, or no such path: lock
            Some(Err(Failure::Db(e))) if is_retryable(&e) => {} // a conflict: the locked path settles it
            Some(Err(failure)) => return Err(failure.settled("count")),
        }
    }
    let mut retries = 0;
    loop {
        if let Some(done) = settle(backend.locked(hashes, generation, decide).await, &mut retries) {
            return done;
        }
    }
}
