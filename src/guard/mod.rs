//! `Guarded`: the deadline and the in-flight cap that every store call goes through.
//!
//! Every call is answered within the deadline (2 s by default): one that takes
//! longer, or fails, is answered unavailable. A call past its deadline may still
//! be running in the store — a database waiting on a lock, say — so it keeps its
//! in-flight slot until the store really finishes it; past the cap (64 by
//! default) a call is answered unavailable at once, without reaching the store.
//!
//! There are three ways a call runs, and none lends the caller's borrowed
//! `apply` to work that may outlive it (the crate forbids `unsafe_code`):
//! - a store that [answers at once](LimitStore::answers_at_once) (the memory
//!   store) runs in the caller's task with the caller's own `apply`, and
//!   nothing is spawned; a call that finishes on its first poll takes no
//!   in-flight place (it never waited);
//! - an [owned `apply`](LimitStore::update_owned) goes with the call, which
//!   the caller's task runs until it ends; if the caller stops waiting, or
//!   the deadline passes, a task of its own takes the call over and finishes
//!   it, even when the caller's future was leaked (`handoff.rs`). From that
//!   moment the `apply` answers `Keep` for every key, so a late call writes
//!   nothing;
//! - a borrowed `apply` on a store that may wait is reached only by message
//!   (`ask`): the work sends the entries, the caller answers the writes.
//!
//! A call whose `apply` ran just before the deadline may still commit after the
//! caller was answered unavailable: the store finishes what it started.

mod ask;
mod call_guard;
mod handoff;
mod integer_counts;
mod owned_keys;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use crate::{Apply, Entry, LimitStore, Millis, OwnedApply, StoreError, Write};
pub(crate) use call_guard::CallGuard;
use call_guard::Slot;
use handoff::Cell;
use owned_keys::OwnedKeys;
use tokio::time::Instant;

/// The default deadline of a store call.
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(2);
/// The longest deadline: one given longer (up to `Duration::MAX`) is taken
/// as this. No caller waits an hour for a rate limit, and a deadline past
/// what a clock can add would overflow it.
pub(crate) const MAX_DEADLINE: Duration = Duration::from_secs(3600);
/// The shortest deadline: one given shorter (zero) is taken as this, as a
/// cap of 0 calls in flight is taken as 1.
pub(crate) const MIN_DEADLINE: Duration = Duration::from_millis(1);
/// The default number of store calls that may run at once.
pub(crate) const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// `deadline` within [`MIN_DEADLINE`] and [`MAX_DEADLINE`]: what every
/// setter of a deadline takes.
pub(crate) fn bounded(deadline: Duration) -> Duration {
    deadline.clamp(MIN_DEADLINE, MAX_DEADLINE)
}

/// Wraps any store with the deadline and the in-flight cap. Implements
/// [`LimitStore`]; needs a tokio runtime for a store that may wait.
pub struct Guarded<S: LimitStore + ?Sized + 'static = dyn LimitStore> {
    inner: Arc<S>,
    guard: CallGuard,
}

impl<S: LimitStore + ?Sized + 'static> std::fmt::Debug for Guarded<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guarded")
            .field("deadline", &self.guard.deadline)
            .field("max_in_flight", &self.guard.max_in_flight)
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
    /// calls running in it at once (a cap of 0 is taken as 1). A deadline is
    /// taken between 1 ms and 1 h:
    /// `Duration::ZERO` as 1 ms, `Duration::MAX` as an hour.
    pub fn with_limits(inner: Arc<S>, deadline: Duration, max_in_flight: usize) -> Self {
        Guarded { inner, guard: CallGuard::new(deadline, max_in_flight) }
    }

    /// The guarded store, as given: a call on it has no deadline and takes
    /// no in-flight place (a health probe that must not take one from an
    /// attempt calls it so, within [`deadline`](Self::deadline)).
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// The deadline of each call, as taken (see [`with_limits`](Self::with_limits)).
    pub fn deadline(&self) -> Duration {
        self.guard.deadline
    }

    /// Store calls running now, including those whose callers stopped waiting.
    pub fn in_flight(&self) -> usize {
        self.guard.in_flight()
    }
}

#[async_trait::async_trait]
impl<S: LimitStore + ?Sized + 'static> LimitStore for Guarded<S> {
    fn shared(&self) -> bool {
        self.inner.shared()
    }

    fn answers_at_once(&self) -> bool {
        self.inner.answers_at_once()
    }

    fn is_guarded(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        self.inner.stats()
    }

    /// The inner store's, each count under the guard's rules: see
    /// `integer_counts.rs`.
    fn integer_counts(&self) -> Option<&dyn crate::IntegerCounts> {
        self.inner.integer_counts().is_some().then_some(self as &dyn crate::IntegerCounts)
    }

    /// The inner store's own `update_now`, with a panic answered unavailable.
    /// It never waits, so it needs neither the deadline nor an in-flight place.
    fn update_now(&self, keys: &[&str], apply: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
        if !self.inner.answers_at_once() {
            return None;
        }
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.update_now(keys, apply))) {
            Ok(None) => None,
            Ok(Some(answer)) => Some(self.guard.settle(Ok(answer))),
            Err(panic) => Some(self.guard.settle::<()>(Err(panic))),
        }
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        if self.inner.answers_at_once() {
            if let Some(answer) = self.update_now(keys, apply) {
                return answer;
            }
            return self.guard.at_once(self.inner.update(keys, apply)).await;
        }
        let slot = self.guard.slot()?;
        ask::update(self, slot, keys, apply).await
    }

    async fn update_owned(&self, keys: &[&str], mut apply: Box<OwnedApply>) -> Result<(), StoreError> {
        if self.inner.answers_at_once() {
            if let Some(answer) = self.update_now(keys, &mut *apply) {
                return answer;
            }
            return self.guard.at_once(self.inner.update(keys, &mut *apply)).await;
        }
        let slot = self.guard.slot()?;
        let until = Instant::now() + self.guard.deadline;
        let cell = Cell::new();
        let caller = cell.clone();
        // Once the caller stops waiting (or the deadline passes), a late call
        // writes nothing.
        let gated: Box<OwnedApply> =
            Box::new(
                move |current: &[Option<Entry>], now: Millis| {
                    if caller.waiting() {
                        apply(current, now)
                    } else {
                        vec![Write::Keep; current.len()]
                    }
                },
            );
        let inner = self.inner.clone();
        let keys = OwnedKeys::new(keys);
        self.guard
            .owned(cell, until, async move {
                let _slot = slot;
                inner.update_owned(&keys.refs(), gated).await
            })
            .await
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        if self.inner.answers_at_once() {
            return self.guard.at_once(self.inner.read(keys)).await;
        }
        let inner = self.inner.clone();
        let keys = OwnedKeys::new(keys);
        self.guard.call(async move { inner.read(&keys.refs()).await }).await
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        if self.inner.answers_at_once() {
            return self.guard.at_once(self.inner.sweep()).await;
        }
        let inner = self.inner.clone();
        self.guard.call(async move { inner.sweep().await }).await
    }
}
