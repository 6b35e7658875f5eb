//! A borrowed `apply` on a store that may wait: the call runs elsewhere and
//! reaches the caller's `apply` only by message.
//!
//! The work owns all it uses: the keys, the store, the in-flight slot, and an
//! `apply` of its own that sends the entries it is given to the caller and
//! waits, until the call's deadline at most, for the caller's writes. The
//! caller's future receives them, runs its own `apply` in its own task, and
//! answers. A caller that is gone (its future dropped, timed out, or leaked and
//! never polled again) answers nothing: the work's `apply` then answers `Keep`
//! for every key, and the late call writes nothing. Nothing the caller borrows
//! is ever reached from the work.
//!
//! The work's `apply` blocks while it waits, so the work never runs where that
//! would stall the runtime: on a multi-thread runtime it is a task whose wait
//! is a `block_in_place`; on a current-thread runtime it runs on a thread of
//! its own (`Handle::block_on`), as the caller must keep its only thread.
//! The messages are the crate's one way to reach a borrowed closure from
//! another thread ([`crate::ask`]).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::owned_keys::OwnedKeys;
use super::{Guarded, Slot};
use crate::ask::{self as message, Asks};
use crate::error::Unavailable;
use crate::transaction::on_behalf_of_caller;
use crate::{Apply, Entry, LimitStore, Millis, StoreError, Write};

/// What the work ends with: the store's answer, or its panic.
type Outcome = std::thread::Result<Result<(), StoreError>>;

/// Runs `inner.update(keys, …)` away from the caller, answering each run of
/// `apply` by message, and waits for it within the guard's deadline.
pub(super) async fn update<S: LimitStore + ?Sized + 'static>(
    guard: &Guarded<S>,
    slot: Slot,
    keys: &[&str],
    apply: &mut Apply<'_>,
) -> Result<(), StoreError> {
    let Ok(runtime) = Handle::try_current() else {
        return Err(guard.guard.no_runtime());
    };
    let deadline = tokio::time::Instant::now() + guard.guard.deadline;
    let gives_up = Instant::now() + guard.guard.deadline;
    let own_thread = runtime.runtime_flavor() == RuntimeFlavor::CurrentThread;
    let (asks, mut asked) = message::channel::<Entry, Vec<Write>>();
    let (done, outcome) = oneshot::channel::<Outcome>();
    let inner = guard.inner.clone();
    let keys = OwnedKeys::new(keys);
    let work = async move {
        let _slot = slot;
        let mut ask = move |current: &[Option<Entry>], now: Millis| {
            answer(&asks, current, now, gives_up, !own_thread).unwrap_or_else(|| vec![Write::Keep; current.len()])
        };
        inner.update(&keys.refs(), &mut ask).await
    };
    let work = AssertUnwindSafe(on_behalf_of_caller(work)).catch_unwind().map(move |out| drop(done.send(out)));
    if own_thread {
        let spawned =
            std::thread::Builder::new().name("limit-store-guard".into()).spawn(move || runtime.block_on(work));
        if let Err(e) = spawned {
            return Err(guard.guard.unavailable(
                Unavailable::StoreFailed,
                "no thread for the store call".into(),
                Some(e.into()),
            ));
        }
    } else {
        runtime.spawn(work);
    }

    let serve = async {
        while let Some(ask) = asked.recv().await {
            match catch_unwind(AssertUnwindSafe(|| apply(&ask.rows, ask.now))) {
                Ok(writes) => ask.answer(writes),
                Err(_) => return Err(guard.guard.unavailable(Unavailable::StoreFailed, "apply panicked".into(), None)),
            }
        }
        // The work dropped its `apply`: it has finished, or is finishing.
        match outcome.await {
            Ok(out) => guard.guard.settle(out),
            Err(_) => Err(guard.guard.unavailable(Unavailable::StoreFailed, "the store call was lost".into(), None)),
        }
    };
    match tokio::time::timeout_at(deadline, serve).await {
        Ok(result) => result,
        Err(_) => Err(guard.guard.timed_out()),
    }
}

/// The work's side of one run of `apply`: `None` when the caller is gone or
/// does not answer before the call's deadline.
fn answer(
    asks: &Asks<Entry, Vec<Write>>,
    current: &[Option<Entry>],
    now: Millis,
    gives_up: Instant,
    in_place: bool,
) -> Option<Vec<Write>> {
    let answer = message::ask(asks, current, now)?;
    let wait = || answer.wait(gives_up, Duration::ZERO, Duration::ZERO);
    if in_place {
        tokio::task::block_in_place(wait)
    } else {
        wait()
    }
}
