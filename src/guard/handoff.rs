//! [`handoff`]: a call that owns all it uses, run in the caller's task until
//! it ends, and handed to a task of its own the moment the caller stops
//! waiting or the deadline passes, so that it still runs to its end and keeps
//! its in-flight slot until then.
//!
//! The caller's future polls the call itself: no task is spawned for a call
//! that ends in time, the usual case. The call sits in a cell shared with the
//! deadline's timer, whose waker is the cell's own, not the caller's: when
//! the timer fires it takes the call out of the cell, spawns it, and wakes
//! the caller, who answers unavailable. So a call is handed over at its
//! deadline even when the caller's future is leaked (`mem::forget`) and never
//! polled again. A caller that drops its future hands the call over as it
//! goes. Whoever takes the call out of the cell first spawns it; no one can
//! poll it after.
//!
//! The timer never waits for the cell's lock: a caller may be polling the
//! call (a store that blocks in place, say), so the timer marks the call
//! expired and leaves it to that caller, who checks the mark after it lets
//! the lock go. A `SeqCst` fence on each side, between the mark and the lock
//! (the timer) and between the lock and the mark (the caller), means one of
//! them sees the other: never both miss.

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use parking_lot::{Mutex, MutexGuard};
use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::StoreError;

/// What a call ends with: its answer, or its panic.
pub(super) type Outcome<T> = std::thread::Result<Result<T, StoreError>>;

/// A call, boxed so that it can move to a task of its own after it was polled.
pub(super) type Call<T> = Pin<Box<dyn Future<Output = Outcome<T>> + Send>>;

/// How a call that was handed its cell ended for the caller.
pub(super) enum Handed<T> {
    /// It ended in the caller's task.
    Ended(Outcome<T>),
    /// Its deadline passed first: a task of its own finishes it.
    Late,
    /// It waits, and there is no runtime to keep its deadline: dropped.
    NoRuntime,
}

/// What the caller, its call and the deadline share; made before the call,
/// so that the call can ask whether the caller still waits.
pub(super) struct Cell<T> {
    held: Mutex<Held<T>>,
    /// The caller no longer waits: it gave up, or the deadline passed.
    gone: AtomicBool,
    /// Where a call handed over runs; `None` outside a runtime.
    runtime: Option<Handle>,
}

struct Held<T> {
    /// `None` before the call is given, and once it ended or was handed over.
    call: Option<Call<T>>,
    /// The caller's waker, for the deadline to wake.
    waker: Option<Waker>,
}

impl<T: Send + 'static> Cell<T> {
    /// A cell for a call made in the current runtime, if any.
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Cell {
            held: Mutex::new(Held { call: None, waker: None }),
            gone: AtomicBool::new(false),
            runtime: Handle::try_current().ok(),
        })
    }

    /// Whether the caller still waits for the call: false from the moment it
    /// gives up or its deadline passes, even if its future was leaked.
    pub(super) fn waiting(&self) -> bool {
        !self.gone.load(Ordering::Acquire)
    }

    /// Polls the call in the caller's task: its outcome, or `None` once it
    /// was handed over at the deadline.
    fn poll_call(&self, cx: &mut Context<'_>) -> Poll<Option<Outcome<T>>> {
        {
            let mut held = self.held.lock();
            let Some(call) = held.call.as_mut() else { return Poll::Ready(None) };
            if let Poll::Ready(outcome) = call.as_mut().poll(cx) {
                held.call = None;
                return Poll::Ready(Some(outcome));
            }
            if !held.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                held.waker = Some(cx.waker().clone());
            }
        }
        fence(Ordering::SeqCst);
        if self.gone.load(Ordering::Relaxed) {
            self.hand_off();
            return Poll::Ready(None);
        }
        Poll::Pending
    }

    /// The caller stops waiting: takes the call out of the cell, if it is
    /// still there, and spawns it.
    fn hand_off(&self) {
        self.gone.store(true, Ordering::Release);
        let held = self.held.lock();
        self.spawn(held);
    }

    fn spawn(&self, mut held: MutexGuard<'_, Held<T>>) {
        let call = held.call.take();
        drop(held);
        if let (Some(call), Some(runtime)) = (call, &self.runtime) {
            // Detached: the call keeps its slot until it ends. A runtime
            // shutting down drops it, and the slot with it.
            drop(runtime.spawn(call));
        }
    }
}

/// Runs `call` in the caller's task until it ends, or until `until`, when a
/// task of its own takes it over.
pub(super) async fn handoff<T: Send + 'static>(cell: Arc<Cell<T>>, call: Call<T>, until: Instant) -> Handed<T> {
    cell.held.lock().call = Some(call);
    let _on_drop = HandOffOnDrop(&cell);
    // The first poll is where a store sends its request; a call that ends on
    // it needs no deadline.
    match poll_fn(|cx| Poll::Ready(cell.poll_call(cx))).await {
        Poll::Ready(Some(outcome)) => return Handed::Ended(outcome),
        Poll::Ready(None) => return Handed::Late,
        Poll::Pending => {}
    }
    if cell.runtime.is_none() {
        return Handed::NoRuntime;
    }
    let deadline_waker = Waker::from(cell.clone());
    let mut deadline = pin!(tokio::time::sleep_until(until));
    // Armed with the cell's waker: the deadline is kept without the caller.
    if deadline.as_mut().poll(&mut Context::from_waker(&deadline_waker)).is_ready() {
        cell.hand_off();
        return Handed::Late;
    }
    match poll_fn(|cx| cell.poll_call(cx)).await {
        Some(outcome) => Handed::Ended(outcome),
        None => Handed::Late,
    }
}

/// The deadline's timer: hands the call over, unless the caller is polling
/// it right now, and wakes the caller.
impl<T: Send + 'static> Wake for Cell<T> {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.gone.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if let Some(mut held) = self.held.try_lock() {
            let waker = held.waker.take();
            self.spawn(held);
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// Hands the call over when the caller's future is dropped before it ended
/// (and drops it when there is no runtime to hand it to).
struct HandOffOnDrop<'a, T: Send + 'static>(&'a Cell<T>);

impl<T: Send + 'static> Drop for HandOffOnDrop<'_, T> {
    fn drop(&mut self) {
        self.0.hand_off();
    }
}

#[cfg(test)]
mod tests;
