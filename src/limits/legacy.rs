//! The earlier store contract, [`RateLimitStore`]: a counter per key with
//! `increment` and `reset`. An app that passes one keeps it serving the
//! `sign-in` and `api` limits; the other limits count in the limit store.
//!
//! The earlier contract has no atomic read-modify-write, so these two limits
//! count the way they did before: every attempt increments each part's
//! counter (refused attempts too), and an attempt is allowed while every
//! count stays within its part's budget, in fixed windows of the part's
//! window. Lockout and GCRA don't apply there; a value with a budget of its
//! own ([`value_override`](super::LimitsBuilder::value_override)) counts by
//! that budget and window.
//!
//! Its calls keep the same guard's rules as every store's (`CallGuard`):
//! answered within the deadline (2 s), at most 64 running at once (both
//! settings of the builder), a slow call keeping its place until it really
//! ends.
//!
//! [`GuardedLegacy`] is the contract's adapter: a limit's
//! [`Backend`](super::backend::Backend) like the limit store, so no call
//! of [`Limits`](super::Limits) asks which one a limit counts in.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::error::BoxError;
use crate::guard::CallGuard;
use crate::{Millis, StoreError, Write};

use super::algorithm::{self, Algorithm, Outcome};
use super::backend::{Answered, Backend, CostNotCounted};
use super::parts;
use super::store_key::CallKeys;

/// The earlier store contract: a counter per key that expires with its window.
#[async_trait::async_trait]
pub trait RateLimitStore: Send + Sync {
    /// Adds one to `key`'s counter, starting a window of `window` when it has
    /// none, and answers the count after the increment and when the window
    /// ends (ms since the Unix epoch).
    async fn increment(&self, key: &str, window: Duration) -> Result<(u64, Millis), BoxError>;
    /// Removes `key`'s counter.
    async fn reset(&self, key: &str) -> Result<(), BoxError>;
}

/// The names of the limits an earlier-contract store keeps serving.
pub const SERVED: [&str; 2] = [super::presets::SIGN_IN, super::presets::API];

/// A [`RateLimitStore`] behind the guard's rules, the same as any store's
/// ([`CallGuard`]): the deadline, the in-flight cap, a panic answered
/// unavailable, and the unavailable answers logged.
pub(crate) struct GuardedLegacy {
    store: Arc<dyn RateLimitStore>,
    guard: CallGuard,
}

impl GuardedLegacy {
    pub(crate) fn new(store: Arc<dyn RateLimitStore>, deadline: Duration, max_in_flight: usize) -> Self {
        GuardedLegacy { store, guard: CallGuard::new(deadline, max_in_flight) }
    }

    async fn increment(&self, key: String, window: Duration) -> Result<(u64, Millis), StoreError> {
        let store = self.store.clone();
        self.guard.call(async move { store.increment(&key, window).await.map_err(failed) }).await
    }

    /// The earlier contract's count: every part's counter incremented in
    /// turn, the attempt allowed while each count is within its budget.
    async fn increment_all(&self, keys: &CallKeys, algorithms: &[Algorithm]) -> Result<Answered, StoreError> {
        let mut outcomes = Vec::with_capacity(keys.len());
        let mut now = SystemClock.now();
        for (i, key) in keys.iter() {
            let algorithm = &algorithms[i];
            let window = Duration::from_millis(u64::try_from(algorithm.window()).unwrap_or(0));
            let (count, reset_at) = self.increment(key.to_owned(), window).await?;
            now = SystemClock.now();
            let budget = algorithm.budget();
            outcomes.push(if count <= budget {
                Outcome { allowed: true, remaining: budget - count, reset_at, retry_after: None, write: Write::Keep }
            } else {
                Outcome::refused(0, reset_at, reset_at, now)
            });
        }
        let held = parts::held_of(&outcomes);
        Ok((algorithm::join(outcomes, now).1, held, now))
    }
}

/// The earlier contract's error, as the limit store's.
fn failed(e: BoxError) -> StoreError {
    StoreError::store_failed("the RateLimitStore failed", e)
}

/// The earlier contract as a limit's backend: it counts one at a time
/// (refusing any other cost, counting nothing), increments refused
/// attempts too, and answers no attempt here and now.
#[async_trait::async_trait]
impl Backend for GuardedLegacy {
    async fn count(
        &self,
        keys: &CallKeys,
        algorithms: &Arc<[Algorithm]>,
        cost: u64,
    ) -> Result<Result<Answered, StoreError>, CostNotCounted> {
        if cost != 1 {
            return Err(CostNotCounted);
        }
        Ok(self.increment_all(keys, algorithms).await)
    }

    async fn reset(&self, keys: &CallKeys) -> Result<(), StoreError> {
        for (_, key) in keys.iter() {
            let (store, key) = (self.store.clone(), key.to_owned());
            self.guard.call(async move { store.reset(&key).await.map_err(failed) }).await?;
        }
        Ok(())
    }
}
