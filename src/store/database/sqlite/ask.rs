//! How the writer reaches a count's `decide`: only by message.
//!
//! `decide` borrows the caller's `apply`, and the writer runs on another
//! thread, which may go on after the caller left (a deadline, a dropped
//! future, one leaked with `mem::forget`). So the writer never holds it: inside
//! the transaction it sends the rows it read and the clock to the count's
//! caller, whose future runs its own `decide` in its own task and sends the
//! writes back. A caller that is gone answers nothing (its channel is closed,
//! or it is silent until the count's deadline) and its count writes nothing.
//!
//! A count whose `decide` is owned ([`Decider::Owned`]: `update_owned`, as
//! `Limits` counts) is decided by the writer itself, with no message, while
//! its caller still waits; a caller that stopped waiting gets nothing written.
//!
//! The messages are the crate's one way to reach a borrowed closure from
//! another thread ([`crate::ask`]), which the guard uses too.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::super::error::Failure;
use super::super::row::{Decide, OwnedDecide, RowWrite, Stored};
use super::pool::LINGER;
use crate::ask::{self as message, Answer, Question};
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// `decide`'s answer.
pub(super) type Decided = Result<Vec<RowWrite>, StoreError>;

/// The writer asks a count's caller to decide on the rows it read.
pub(super) type Ask = Question<Stored, Decided>;

/// Where the writer sends a count's questions.
pub(super) type Asks = message::Asks<Stored, Decided>;
/// Where a count's caller receives them.
pub(super) type Asked = message::Asked<Stored, Decided>;

/// A channel for one count's questions.
pub(super) fn channel() -> (Asks, Asked) {
    message::channel()
}

/// How long the writer spins for an answer, keeping its core (a yield on a
/// busy machine can give it away for a time slice): a caller that waits
/// answers within a few µs.
const SPIN: Duration = Duration::from_micros(40);

/// How the writer gets a count decided.
pub(super) enum Decider {
    /// By asking its caller, whose `decide` borrows.
    Asks(Asks),
    /// By running the count's own `decide`.
    Owned(OwnedDecide),
}

/// A count's decision, or the question whose answer the writer waits for.
pub(super) enum Pending {
    Asked(Answer<Decided>),
    Decided(Decided),
}

/// Sends `rows` and `now` to the caller, or decides on them with an owned
/// `decide` at once; `None` when the caller is gone (`waiting` false).
pub(super) fn ask(decider: &Decider, waiting: bool, rows: &[Option<Stored>], now: Millis) -> Option<Pending> {
    match decider {
        Decider::Asks(asks) => Some(Pending::Asked(message::ask(asks, rows, now)?)),
        Decider::Owned(decide) if waiting => Some(Pending::Decided((decide.lock())(rows, now))),
        Decider::Owned(_) => None,
    }
}

impl Pending {
    /// The caller's answer, or `None` when it is gone or silent until `until`.
    pub(super) fn wait(self, until: Instant) -> Option<Decided> {
        match self {
            Pending::Decided(decided) => Some(decided),
            Pending::Asked(answer) => answer.wait(until, SPIN, LINGER),
        }
    }
}

/// The answer of a count whose caller answered nothing: it wrote nothing.
pub(super) fn gone() -> Failure {
    Failure::Store(StoreError::unavailable(
        Unavailable::Timeout,
        "the caller stopped waiting before the count was decided; nothing was written",
    ))
}

/// The caller's side: answers `ask` with its own `decide`.
pub(super) fn answer(ask: Ask, decide: &mut Decide<'_>) {
    let decided = decide(&ask.rows, ask.now);
    ask.answer(decided);
}

/// What the caller's future sees next: a question, or its count's result.
pub(super) enum Next {
    Ask(Ask),
    Done(Result<(), Failure>),
}

/// Without waiting: a question if one came, else the result if it came. A
/// count that lends no `decide` has no questions (`asked` is `None`).
pub(super) fn try_next(asked: Option<&mut Asked>, done: &mut oneshot::Receiver<Result<(), Failure>>) -> Option<Next> {
    if let Some(Ok(ask)) = asked.map(Asked::try_recv) {
        return Some(Next::Ask(ask));
    }
    match done.try_recv() {
        Ok(result) => Some(Next::Done(result)),
        Err(oneshot::error::TryRecvError::Empty) => None,
        Err(oneshot::error::TryRecvError::Closed) => Some(Next::Done(Err(lost()))),
    }
}

/// Waits for a question or the result (only the result, with no `asked`).
pub(super) async fn next(asked: Option<&mut Asked>, done: &mut oneshot::Receiver<Result<(), Failure>>) -> Next {
    let Some(asked) = asked else {
        return Next::Done(done.await.unwrap_or_else(|_| Err(lost())));
    };
    tokio::select! {
        biased;
        Some(ask) = asked.recv() => Next::Ask(ask),
        result = done => Next::Done(result.unwrap_or_else(|_| Err(lost()))),
    }
}

fn lost() -> Failure {
    Failure::Store(StoreError::unavailable(
        Unavailable::StoreFailed,
        "the SQLite writer stopped before it answered this count (a panic in it, or the runtime shutting down); it \
         may not have been written",
    ))
}
