//! Recording a history: each call's keys, what it saw or returned, what it
//! wrote, and when it was invoked and answered.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::{Apply, Entry, LimitStore, Millis, StoreError, Write};

/// What one recorded call did.
#[derive(Clone, Debug, PartialEq)]
pub enum Call {
    /// An [`update`](LimitStore::update) that succeeded: what its last `apply`
    /// run saw and wrote, and the store's clock it was given. The last run is
    /// the one whose writes were stored: a store that retries runs `apply`
    /// again after a run it did not commit, never after the one it did.
    Update {
        /// The live entries `apply` saw, one per key.
        seen: Vec<Option<Entry>>,
        /// What `apply` returned, one write per key.
        wrote: Vec<Write>,
        /// The store's clock `apply` was given.
        now: Millis,
    },
    /// A [`read`](LimitStore::read) that succeeded, and what it answered.
    Read {
        /// The entries read, one per key.
        got: Vec<Option<Entry>>,
    },
}

/// One completed call: its keys, what it did, and its invoke and return times
/// (nanoseconds since the history began, on one monotonic clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// The keys of the call, in the call's order.
    pub keys: Vec<String>,
    /// What the call did.
    pub call: Call,
    /// When the call was made.
    pub invoked: u64,
    /// When the call was answered: at or after `invoked`.
    pub returned: u64,
}

/// A history of concurrent calls, shared by the tasks that make them: clone
/// it into each task, call the store through it, then
/// [`check`](super::check) its [`operations`](History::operations).
///
/// Only calls that succeed are recorded. A failed update may or may not have
/// been stored, and what it wrote is not known: check histories of a healthy
/// store, where every call succeeds.
#[derive(Clone, Debug)]
pub struct History {
    began: Instant,
    operations: Arc<Mutex<Vec<Operation>>>,
}

impl Default for History {
    fn default() -> Self {
        History::new()
    }
}

impl History {
    /// An empty history, beginning now.
    pub fn new() -> Self {
        History { began: Instant::now(), operations: Arc::default() }
    }

    fn since_began(&self) -> u64 {
        u64::try_from(self.began.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Adds an operation recorded by other means.
    pub fn record(&self, operation: Operation) {
        self.operations.lock().unwrap_or_else(PoisonError::into_inner).push(operation);
    }

    /// The operations recorded so far, in the order they were answered.
    pub fn operations(&self) -> Vec<Operation> {
        self.operations.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Calls `store.update(keys, apply)` and, when it succeeds, records what
    /// the last run of `apply` saw and wrote.
    pub async fn update(&self, store: &dyn LimitStore, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        let mut last = None;
        let invoked = self.since_began();
        let result = store
            .update(keys, &mut |current: &[Option<Entry>], now: Millis| {
                let wrote = apply(current, now);
                last = Some(Call::Update { seen: current.to_vec(), wrote: wrote.clone(), now });
                wrote
            })
            .await;
        let returned = self.since_began();
        result?;
        let call = last.ok_or_else(crate::store::no_apply_run)?;
        self.record(Operation { keys: own(keys), call, invoked, returned });
        Ok(())
    }

    /// Calls `store.read(keys)` and, when it succeeds, records what it answered.
    pub async fn read(&self, store: &dyn LimitStore, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        let invoked = self.since_began();
        let got = store.read(keys).await?;
        let returned = self.since_began();
        self.record(Operation { keys: own(keys), call: Call::Read { got: got.clone() }, invoked, returned });
        Ok(got)
    }
}

fn own(keys: &[&str]) -> Vec<String> {
    keys.iter().map(|k| (*k).to_owned()).collect()
}
