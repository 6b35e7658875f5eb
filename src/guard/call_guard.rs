//! [`CallGuard`]: the guard's rules for one store call, whatever the store:
//! an in-flight place, the deadline, a panic answered unavailable, and an
//! unavailable answer logged once a minute per reason. [`Guarded`](super::Guarded)
//! holds one for the store it wraps; the earlier contract's adapter
//! (`limits/legacy.rs`) holds one for its calls, so both keep the same rules.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;

use super::bounded;
use super::handoff::{handoff, Cell, Handed};
use crate::error::Unavailable;
use crate::log::{Kind, Throttle};
use crate::StoreError;

/// The deadline, the in-flight cap and the logs that every call of one
/// guarded store shares. Cheap to clone: clones share the places and logs.
#[derive(Clone)]
pub(crate) struct CallGuard {
    pub(super) deadline: Duration,
    pub(super) max_in_flight: usize,
    in_flight: Arc<AtomicUsize>,
    pub(super) logs: Arc<Logs>,
}

/// The throttles of the guard's warnings, one per reason; shared with the
/// integer counters it hands out.
pub(super) type Logs = [Throttle; 4];

impl CallGuard {
    /// Rules of a `deadline` per call (taken between 1 ms and 1 h) and at
    /// most `max_in_flight` calls running at once (a cap of 0 is taken as 1).
    pub(crate) fn new(deadline: Duration, max_in_flight: usize) -> Self {
        CallGuard {
            deadline: bounded(deadline),
            max_in_flight: max_in_flight.max(1),
            in_flight: Arc::new(AtomicUsize::new(0)),
            logs: Arc::new([Throttle::new(), Throttle::new(), Throttle::new(), Throttle::new()]),
        }
    }

    /// Runs `call`, work that owns all it uses, under the rules: it takes an
    /// in-flight place (answered overloaded past the cap) and holds it until
    /// it really ends; it runs in the caller's task, and a task of its own
    /// finishes it if the caller stops waiting or the deadline passes (the
    /// caller is then answered unavailable).
    pub(crate) async fn call<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        let slot = self.slot()?;
        let until = Instant::now() + self.deadline;
        self.owned(Cell::new(), until, async move {
            let _slot = slot;
            call.await
        })
        .await
    }

    /// Store calls running now, including those whose callers stopped waiting.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Takes an in-flight place, or answers overloaded past the cap.
    pub(super) fn reserve(&self) -> Result<(), StoreError> {
        let before = self.in_flight.fetch_add(1, Ordering::AcqRel);
        if before >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            return Err(self.unavailable(
                Unavailable::Overloaded,
                format!("{} store calls are still running", self.max_in_flight),
                None,
            ));
        }
        Ok(())
    }

    /// A place that work outliving the caller can own.
    pub(super) fn slot(&self) -> Result<Slot, StoreError> {
        self.reserve()?;
        Ok(Slot(self.in_flight.clone()))
    }

    /// Builds an unavailable answer and logs it, once a minute per reason.
    pub(super) fn unavailable(
        &self,
        reason: Unavailable,
        detail: String,
        source: Option<crate::error::BoxError>,
    ) -> StoreError {
        let err = StoreError::Unavailable { reason, detail, source };
        self.log(&err);
        err
    }

    pub(super) fn timed_out(&self) -> StoreError {
        self.unavailable(Unavailable::Timeout, format!("no answer within {:?}", self.deadline), None)
    }

    pub(super) fn no_runtime(&self) -> StoreError {
        self.unavailable(Unavailable::StoreFailed, "Guarded needs a tokio runtime to run store calls".into(), None)
    }

    pub(super) fn log(&self, err: &StoreError) {
        log(&self.logs, err);
    }

    /// The answer of a call that ended: its own, or unavailable for a panic.
    pub(super) fn settle<T>(
        &self,
        outcome: Result<Result<T, StoreError>, Box<dyn Any + Send>>,
    ) -> Result<T, StoreError> {
        match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => {
                self.log(&err);
                Err(err)
            }
            Err(_panic) => Err(self.unavailable(Unavailable::StoreFailed, "the store call panicked".into(), None)),
        }
    }

    /// Runs a call of a store that answers at once in the caller's task, under
    /// the deadline in case it waits after all.
    ///
    /// A call that finishes on its first poll never waited, so it takes no
    /// in-flight place: it runs within one synchronous poll, so the calls
    /// doing so are at most the threads polling, and skipping the place
    /// spares every count two atomic writes on a line all threads share. A
    /// call that waits after all takes its place then, held by the caller's
    /// future, and is dropped (answered overloaded) past the cap.
    pub(super) async fn at_once<T>(&self, call: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
        let mut call = pin!(AssertUnwindSafe(call).catch_unwind());
        // Polled once without a timer: the usual case, and no runtime needed.
        let first = std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await;
        let outcome = match first {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => {
                self.reserve()?;
                let _slot = SlotHere(&self.in_flight);
                match tokio::time::timeout(self.deadline, call).await {
                    Ok(outcome) => outcome,
                    Err(_) => return Err(self.timed_out()),
                }
            }
        };
        self.settle(outcome)
    }

    /// Runs one call that owns all it uses, in the caller's task; a task of
    /// its own takes it over if the caller stops waiting or `until` passes
    /// (see `handoff.rs`). The call owns its in-flight slot, so the slot is
    /// freed when the call really ends, not when we stop waiting.
    pub(super) async fn owned<T: Send + 'static>(
        &self,
        cell: Arc<Cell<T>>,
        until: Instant,
        call: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        // Its first poll is the caller's, in the caller's task: a store's
        // refusal inside the app's transaction (made before its first await)
        // sees the caller's marker there, with nothing carried.
        match handoff(cell, Box::pin(AssertUnwindSafe(call).catch_unwind()), until).await {
            Handed::Ended(outcome) => self.settle(outcome),
            Handed::Late => Err(self.timed_out()),
            Handed::NoRuntime => Err(self.no_runtime()),
        }
    }
}

/// Logs `err` when it is an unavailable answer, once a minute per reason.
pub(super) fn log(logs: &Logs, err: &StoreError) {
    if let Some(reason) = err.unavailable_reason() {
        let throttle = match reason {
            Unavailable::Timeout => &logs[0],
            Unavailable::Overloaded => &logs[1],
            Unavailable::Full => &logs[2],
            _ => &logs[3],
        };
        if throttle.ready() {
            tracing::warn!(kind = Kind::Unavailable.as_str(), reason = reason.as_str(), error = %err, "limit store call answered unavailable");
        }
    }
}

/// One in-flight place, owned by work that may outlive its caller; given back
/// when dropped.
pub(super) struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One in-flight place held by the caller's own future.
struct SlotHere<'a>(&'a AtomicUsize);

impl Drop for SlotHere<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
