//! How a limit counts ([`Backend`]): in the limit store, each attempt one
//! atomic update over the limit's keys (here); or, for the limits an
//! earlier-contract store keeps serving, through that contract's adapter
//! (`legacy.rs`). [`Limits`](super::Limits) calls only the trait, so neither
//! way is a fork in its methods.

use std::sync::Arc;

use crate::{Entry, IntegerCounts, LimitStore, Millis, StoreError, Write};

use super::algorithm::{Algorithm, Verdict};
use super::parts::{decide_held, Held};
use super::store_key::CallKeys;

/// What a count answered: the verdict, what each part holds, and when it
/// was counted (the store's clock).
pub(super) type Answered = (Verdict, Held, Millis);

/// An attempt's cost that a backend does not count (the earlier contract
/// counts one at a time): nothing was counted.
#[derive(Debug)]
pub(super) struct CostNotCounted;

/// Where and how a limit counts.
#[async_trait::async_trait]
pub(super) trait Backend: Send + Sync {
    /// The store that [answers at once](LimitStore::answers_at_once), when
    /// the limit counts in one: its attempts may be counted here and now.
    fn at_once(&self) -> Option<&dyn LimitStore> {
        None
    }

    /// The store's [integer counts](IntegerCounts), when it offers them.
    fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
        None
    }

    /// Counts an attempt of `cost` on `keys` (each with its part's index),
    /// by the parts' `algorithms`: what the store answered, or its failure;
    /// [`CostNotCounted`] when this backend takes no such cost.
    async fn count(
        &self,
        keys: &CallKeys,
        algorithms: &Arc<[Algorithm]>,
        cost: u64,
    ) -> Result<Result<Answered, StoreError>, CostNotCounted>;

    /// Clears the counts of `keys`.
    async fn reset(&self, keys: &CallKeys) -> Result<(), StoreError>;
}

/// The limit store (guarded): an attempt is one atomic update of all the
/// limit's keys.
#[async_trait::async_trait]
impl Backend for Arc<dyn LimitStore> {
    fn at_once(&self) -> Option<&dyn LimitStore> {
        self.answers_at_once().then_some(&**self)
    }

    fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
        (**self).integer_counts()
    }

    /// One way in, whichever the store: `update_owned`, with an `apply`
    /// that owns what it uses and hands its verdict back through a shared
    /// slot. The rule: a store that runs its call elsewhere (a guarded
    /// database or Redis store, whose call may outlive a caller that gave
    /// up) must be able to keep `apply`; an owned one never reaches memory
    /// its caller freed, and runs there with no message back to the caller.
    /// A store that answers at once runs it in place (its guard's
    /// `update_now`). The memory store's attempts never come here: they are
    /// answered at once, before any future (`at_once.rs`); only a store that
    /// answers at once without an `update_now` of its own does, for which
    /// the slot's allocation is nothing beside a boxed future.
    async fn count(
        &self,
        keys: &CallKeys,
        algorithms: &Arc<[Algorithm]>,
        cost: u64,
    ) -> Result<Result<Answered, StoreError>, CostNotCounted> {
        let algorithms = algorithms.clone();
        let answer = Arc::new(parking_lot::Mutex::new(None));
        let last = answer.clone();
        let apply = move |current: &[Option<Entry>], now: Millis| {
            let (writes, verdict, held) = decide_held(&algorithms, current, now, cost);
            *last.lock() = Some((verdict, held, now));
            writes
        };
        let done = self.update_owned(&keys.refs(), Box::new(apply)).await;
        Ok(done.and_then(|()| answer.lock().take().ok_or_else(crate::store::no_apply_run)))
    }

    async fn reset(&self, keys: &CallKeys) -> Result<(), StoreError> {
        let delete = |current: &[Option<Entry>], _| vec![Write::Delete; current.len()];
        self.update_owned(&keys.refs(), Box::new(delete)).await
    }
}
