//! `Guarded`: the deadline and the in-flight cap that every store call goes through.
//!
//! Every call is answered within the deadline (2 s by default): one that takes
//! longer, or fails, is answered unavailable. A call past its deadline may still
//! be running in the store — a database waiting on a lock, say — so it keeps its
//! in-flight slot until the store really finishes it; past the cap (64 by
//! default) a call is answered unavailable at once, without reaching the store.
//!
//! To let the slot follow the real work, the store call runs in a spawned task
//! that outlives the caller if it must. The caller's `apply` is borrowed, so the
//! task reaches it through a shared cell that the caller closes before it returns:
//! from then on the task's `apply` answers `Keep` for every key, and a late call
//! counts nothing. A store that answers without waiting (the memory store) is
//! finished on the first poll, in the caller's task, and nothing is spawned.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use smallvec::SmallVec;

use futures_util::FutureExt;

use crate::cell;
use crate::error::Unavailable;
use crate::log::{Throttle, KIND_UNAVAILABLE};
use crate::{Apply, Entry, LimitStore, StoreError, Write};

/// The default deadline of a store call.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// The default number of store calls that may run at once.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// Wraps any store with the deadline and the in-flight cap. Implements
/// [`LimitStore`]; needs a tokio runtime (it spawns slow calls).
pub struct Guarded<S: LimitStore + ?Sized + 'static = dyn LimitStore> {
    inner: Arc<S>,
    deadline: Duration,
    max_in_flight: usize,
    in_flight: Arc<AtomicUsize>,
    logs: [Throttle; 4],
}

impl<S: LimitStore + ?Sized + 'static> std::fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("deadline", &self.deadline)
            .field("max_in_flight", &self.max_in_flight)
            .field("in_flight", &self.in_flight())
            .finish_non_exhaustive()
    }
}

impl<S: LimitStore + ?Sized + 'static> Guarded<S> {
    /// Guards `inner` with a 2 s deadline and at most 64 calls in flight.
    pub fn new(inner: Arc<S>) -> Self {
        Self::with_limits(inner, DEFAULT_DEADLINE, DEFAULT_MAX_IN_FLIGHT)
    }

    /// Guards `inner` with a `deadline` per call and at most `max_in_flight`
    /// calls running in it at once (a cap of 0 is taken as 1).
    pub fn with_limits(inner: Arc<S>, deadline: Duration, max_in_flight: usize) -> Self {
        Guarded {
            inner,
            deadline,
            max_in_flight: max_in_flight.max(1),
            in_flight: Arc::new(AtomicUsize::new(0)),
            logs: [Throttle::new(), Throttle::new(), Throttle::new(), Throttle::new()],
        }
    }

    /// The guarded store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Store calls running now, including those whose callers stopped waiting.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    fn take_slot(&self) -> Result<Slot, StoreError> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        let slot = Slot(self.in_flight.clone());
        if before >= self.max_in_flight {
            drop(slot);
            return Err(self.unavailable(
                Unavailable::Overloaded,
                format!("{} store calls are still running", self.max_in_flight),
                None,
            ));
        }
        Ok(slot)
    }

    /// Builds an unavailable answer and logs it, once a minute per reason.
    fn unavailable(&self, reason: Unavailable, detail: String, source: Option<crate::error::BoxError>) -> StoreError {
        let err = StoreError::Unavailable { reason, detail, source };
        self.log(&err);
        err
    }

    fn log(&self, err: &StoreError) {
        if let Some(reason) = err.unavailable_reason() {
            let throttle = match reason {
                Unavailable::Timeout => &self.logs[0],
                Unavailable::Overloaded => &self.logs[1],
                Unavailable::Full => &self.logs[2],
                _ => &self.logs[3],
            };
            if throttle.ready() {
                tracing::warn!(kind = KIND_UNAVAILABLE, reason = reason.as_str(), error = %err, "limit store call answered unavailable");
            }
        }
    }

    /// Runs one store call under the deadline. `call` owns its in-flight slot,
    /// so the slot is freed when the call really ends, not when we stop waiting.
    async fn run<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let mut call = Box::pin(AssertUnwindSafe(call).catch_unwind());
        // A store that answers without waiting is done here, with nothing spawned.
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        let outcome = match first {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    return Err(self.unavailable(
                        Unavailable::StoreFailed,
                        "Guarded needs a tokio runtime to run store calls".into(),
                        None,
                    ));
                };
                let task = runtime.spawn(call);
                // The first poll only starts the call (it is where a store sends its
                // request), so the deadline runs from here.
                match tokio::time::timeout(self.deadline, task).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(join)) => Err(Box::new(join) as Box<dyn std::any::Any + Send>),
                    Err(_) => {
                        return Err(self.unavailable(
                            Unavailable::Timeout,
                            format!("no answer within {:?}", self.deadline),
                            None,
                        ))
                    }
                }
            }
        };
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                self.log(&err);
                Err(err)
            }
            Err(_panic) => Err(self.unavailable(Unavailable::StoreFailed, "the store call panicked".into(), None)),
        }
    }
}

/// A call's keys, owned by the call so that it can outlive the caller: one
/// allocation for all of them.
struct OwnedKeys {
    text: String,
    ends: SmallVec<[usize; 4]>,
}

impl OwnedKeys {
    fn new(keys: &[&str]) -> Self {
        let mut text = String::with_capacity(keys.iter().map(|k| k.len()).sum());
        let mut ends = SmallVec::with_capacity(keys.len());
        for key in keys {
            text.push_str(key);
            ends.push(text.len());
        }
        OwnedKeys { text, ends }
    }

    fn refs(&self) -> SmallVec<[&str; 4]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.text[start..end];
                start = end;
                key
            })
            .collect()
    }
}

/// One in-flight place; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[async_trait::async_trait]
impl<S: LimitStore + ?Sized + 'static> LimitStore for Guarded<S> {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        let slot = self.take_slot()?;
        let (lender, borrower) = cell::lend(apply);
        let inner = self.inner.clone();
        let keys = OwnedKeys::new(keys);
        let call = async move {
            let _slot = slot;
            let apply = &mut |current: &[Option<Entry>], now| {
                borrower.call(current, now).unwrap_or_else(|| vec![Write::Keep; current.len()])
            };
            inner.update(&keys.refs(), apply).await
        };
        let result = self.run(call).await;
        // Closing before returning: a call still running answers Keep from now on.
        drop(lender);
        result
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        let slot = self.take_slot()?;
        let inner = self.inner.clone();
        let keys = OwnedKeys::new(keys);
        self.run(async move {
            let _slot = slot;
            inner.read(&keys.refs()).await
        })
        .await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        let slot = self.take_slot()?;
        let inner = self.inner.clone();
        self.run(async move {
            let _slot = slot;
            inner.sweep().await
        })
        .await
    }
}
