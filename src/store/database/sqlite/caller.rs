//! A count's caller at SQLite's writer: it joins the writer's queue, runs
//! the batch itself when it finds the writer idle (on a blocking thread),
//! and waits for the writer's questions, answering each with its
//! own `decide`, until its count's result comes; or, when its `decide` is
//! owned, only for the result. The writer's side is `writer.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::super::error::Failure;
use super::super::queue::{Holding, Joined};
use super::super::row::{Decide, KeyHash, OwnedDecide};
use super::ask::{self, Asked, Decider, Next};
use super::pool::LINGER;
use super::writer::{Queued, Writer};

/// How long the only caller waiting for the writer keeps its runtime thread
/// (no yield) for its answer, before it waits as the others do. Each yield
/// to the runtime wakes an idle runtime thread, which looks for work and
/// parks again, and at 1 caller that churn cost a share of the counts per
/// second (measured in 0949797). The spin covers most lone counts, and is
/// short next to what tokio asks of a task between yields.
const SPIN_ALONE: Duration = Duration::from_micros(40);

impl Writer {
    /// Runs one count in the writer's next batch and answers how it went;
    /// meanwhile answers the writer's questions with `decide`.
    pub(super) async fn count(
        self: &Arc<Self>,
        hashes: &[KeyHash],
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Result<(), Failure> {
        let (asks, asked) = ask::channel();
        self.run_count(hashes, generation, Decider::Asks(asks), Some((asked, decide))).await
    }

    /// [`count`](Self::count) with a `decide` the writer runs itself, inside
    /// the transaction: no question comes to this caller, and no message
    /// goes between the threads.
    pub(super) async fn count_owned(
        self: &Arc<Self>,
        hashes: &[KeyHash],
        generation: i64,
        decide: OwnedDecide,
    ) -> Result<(), Failure> {
        // No one asks: no channel for questions, only the result to wait for.
        self.run_count(hashes, generation, Decider::Owned(decide), None).await
    }

    /// Queues a count decided by `decider`, and waits for its result,
    /// answering the writer's questions, when it lends a `decide`, with it.
    async fn run_count(
        self: &Arc<Self>,
        hashes: &[KeyHash],
        generation: i64,
        decider: Decider,
        mut lent: Option<(Asked, &mut Decide<'_>)>,
    ) -> Result<(), Failure> {
        let (reply, mut done) = oneshot::channel();
        let queued = Queued::new(hashes, generation, decider, reply);
        let joined = self.queue.join(queued);
        // Alone, or next in line: the question comes soon.
        let mut soon = matches!(joined, Joined::Run(_) | Joined::Waiting(0));
        if let Joined::Run(first) = joined {
            let holding = Holding::new(self.clone(), |w: &Writer| &w.queue);
            let writer = self.clone();
            tokio::task::spawn_blocking(move || writer.drain(vec![first], holding));
        }
        let callers = Callers::enter(&self.callers);
        loop {
            match wait(lent.as_mut().map(|(asked, _)| asked), &mut done, soon, callers.alone()).await {
                Next::Ask(question) => {
                    // Only a count that lends its `decide` is asked.
                    if let Some((_, decide)) = lent.as_mut() {
                        ask::answer(question, decide);
                    }
                    soon = true; // the writer writes and commits next
                }
                Next::Done(result) => return result,
            }
        }
    }
}

/// A caller's wait for its writer's question or its count's result: spinning
/// while it is the only count waiting and the answer comes soon, then
/// yielding for a moment, then asleep.
async fn wait(
    mut asked: Option<&mut Asked>,
    done: &mut oneshot::Receiver<Result<(), Failure>>,
    soon: bool,
    alone: bool,
) -> Next {
    if soon && alone {
        // The only count waiting: nothing of this store needs the runtime
        // thread meanwhile, and a yield would wake an idle one.
        let start = Instant::now();
        while start.elapsed() < SPIN_ALONE {
            match ask::try_next(asked.as_deref_mut(), done) {
                Some(next) => return next,
                None => std::hint::spin_loop(),
            }
        }
    }
    if soon {
        // Stay runnable for a moment instead of letting this worker park:
        // waking a parked thread costs more than the count. Other tasks on
        // the worker still run in between.
        let start = Instant::now();
        while start.elapsed() < LINGER {
            match ask::try_next(asked.as_deref_mut(), done) {
                Some(next) => return next,
                None => tokio::task::yield_now().await,
            }
        }
    }
    ask::next(asked, done).await
}

/// One of the counts waiting for their answer, until dropped.
struct Callers<'a>(&'a AtomicUsize, usize);

impl<'a> Callers<'a> {
    fn enter(n: &'a AtomicUsize) -> Self {
        let before = n.fetch_add(1, Ordering::AcqRel);
        Callers(n, before)
    }

    /// No other count was waiting when this one came.
    fn alone(&self) -> bool {
        self.1 == 0
    }
}

impl Drop for Callers<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}
