//! The SQLite store's writer: counts go through one [`Queue`], and whoever
//! holds it busy runs the waiting counts together, one `BEGIN IMMEDIATE`
//! transaction per batch, on a connection of the writer's own. SQLite takes
//! one writer at a time anyway; this way the counts of one instance take
//! turns without a trip through SQLite's busy handler each, and one commit
//! serves a whole batch.
//!
//! A batch runs in rounds. A round takes the waiting counts that share no key
//! with each other, reads their rows, asks each count's caller to decide
//! ([`ask`]: by message, never through the caller's borrowed closure), and
//! writes the answers; the next round reads after those writes. So every
//! count sees the ones before it, and the batch is what running them one at
//! a time would give, while the callers decide side by side. A count whose
//! `decide` refuses, or whose caller stopped waiting, writes nothing and the
//! others go on; a database error part-way rolls the batch back and runs its
//! counts again one transaction each.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::Connection;
use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::super::error::{is_busy, Failure};
use super::super::queue::{Holding, Joined, Queue};
use super::super::row::{Decide, KeyHash};
use super::ask::{self, Asked, Asks, Next, Own};
use super::{count, pool, select, write, Statements};
use crate::error::Unavailable;
use crate::StoreError;

/// The most counts one transaction takes: enough to serve every caller of a
/// busy instance in one commit, few enough to keep the write lock short.
const MAX_BATCH: usize = 64;

/// How long the writer waits for a caller's answer, from when the count was
/// queued: the store's own bound on a count, as the busy timeout is.
const ANSWER_WITHIN: Duration = pool::WAIT;

/// One count waiting for the writer.
pub(super) struct Queued {
    pub(super) hashes: SmallVec<[KeyHash; 4]>,
    pub(super) generation: i64,
    /// Where its caller takes the writer's questions.
    pub(super) asks: Asks,
    /// When the writer stops waiting for its caller's answer.
    pub(super) until: Instant,
    reply: oneshot::Sender<Result<(), Failure>>,
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("keys", &self.hashes.len()).finish_non_exhaustive()
    }
}

/// The queue of counts and the connection that runs them.
#[derive(Debug)]
pub(super) struct Writer {
    path: PathBuf,
    sql: Arc<Statements>,
    queue: Queue<Queued>,
    /// Used only by the holder of the busy queue; `None` until first needed,
    /// and after an error that may have left it unusable.
    conn: Mutex<Option<Connection>>,
    /// Run the first batches on the caller's runtime thread
    /// (`sqlite_in_place`).
    in_place: bool,
    /// Counts committed in a batch with others.
    batched: AtomicU64,
    /// Counts waiting for their answer now.
    callers: AtomicUsize,
}

/// How long the writer waits for the next count before it leaves its
/// thread, and a caller next in line for its answer before it lets its
/// runtime thread park. Waking a parked thread costs tens of µs on a small
/// VM, more than a count; a caller whose count was just answered usually
/// sends its next one within this, and then finds the writer still there.
const LINGER: Duration = Duration::from_micros(150);

/// How long the only caller waiting for the writer keeps its runtime thread
/// (no yield) for its answer, before it waits as the others do. Each yield
/// to the runtime wakes an idle runtime thread, which looks for work and
/// parks again: at 1 caller that churn cost a tenth to a quarter of the
/// counts (BENCHMARKS.md). 40 µs covers most lone counts, and is short next to what tokio
/// asks of a task between yields.
const SPIN_ALONE: Duration = Duration::from_micros(40);

/// Batches a caller runs in place before it hands the rest to a blocking
/// thread, so that its own answer is not held up by a queue that keeps filling.
const IN_PLACE_BATCHES: usize = 4;

impl Writer {
    pub(super) fn new(path: PathBuf, sql: Arc<Statements>, in_place: bool) -> Arc<Self> {
        Arc::new(Writer {
            path,
            sql,
            queue: Queue::new(),
            conn: Mutex::new(None),
            in_place,
            batched: AtomicU64::new(0),
            callers: AtomicUsize::new(0),
        })
    }

    /// Counts committed in a batch with others so far.
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Runs one count in the writer's next batch and answers how it went;
    /// meanwhile answers the writer's questions with `decide`.
    pub(super) async fn count(
        self: &Arc<Self>,
        hashes: &[KeyHash],
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Result<(), Failure> {
        let (reply, mut done) = oneshot::channel();
        let (asks, mut asked) = ask::channel();
        let queued = Queued { hashes: hashes.into(), generation, asks, until: Instant::now() + ANSWER_WITHIN, reply };
        let joined = self.queue.join(queued);
        // Alone, or next in line: the question comes soon.
        let mut soon = matches!(joined, Joined::Run(_) | Joined::Waiting(0));
        if let Joined::Run(first) = joined {
            let holding = Holding::new(self.clone(), |w: &Writer| &w.queue);
            let in_place = self.in_place
                && tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
            if in_place {
                // No hop to another thread and back: this worker runs the
                // batch while the runtime moves its other tasks elsewhere,
                // and answers its own count's question itself.
                let own = Own { asked: &mut asked, decide: &mut *decide };
                tokio::task::block_in_place(|| self.drain(vec![first], holding, Some(IN_PLACE_BATCHES), Some(own)));
            } else {
                let writer = self.clone();
                tokio::task::spawn_blocking(move || writer.drain(vec![first], holding, None, None));
            }
        }
        let callers = Callers::enter(&self.callers);
        loop {
            match wait(&mut asked, &mut done, soon, callers.alone()).await {
                Next::Ask(question) => {
                    ask::answer(question, decide);
                    soon = true; // the writer writes and commits next
                }
                Next::Done(result) => return result,
            }
        }
    }

    /// Runs `batch` and the batches that wait after it until the queue is
    /// empty; after `limit` batches, hands the rest to a blocking thread.
    fn drain(
        self: &Arc<Self>,
        mut batch: Vec<Queued>,
        mut holding: Holding<Writer, Queued>,
        limit: Option<usize>,
        mut own: Option<Own<'_, '_>>,
    ) {
        let mut ran = 0;
        loop {
            if catch_unwind(AssertUnwindSafe(|| self.run(batch, &mut own))).is_err() {
                // The batch's replies were dropped, so its callers are answered;
                // the connection may be mid-transaction: open a new one.
                *self.conn.lock() = None;
            }
            ran += 1;
            let Some(next) = self.next_batch(&mut holding) else { return };
            if limit.is_some_and(|limit| ran >= limit) {
                let writer = self.clone();
                tokio::task::spawn_blocking(move || writer.drain(next, holding, None, None));
                return;
            }
            batch = next;
        }
    }

    /// The next batch, after waiting up to [`LINGER`] for one; `None` (and the
    /// queue idle) if none came.
    fn next_batch(&self, holding: &mut Holding<Writer, Queued>) -> Option<Vec<Queued>> {
        let start = Instant::now();
        while !self.in_place && !self.queue.has_waiting() && start.elapsed() < LINGER {
            std::thread::yield_now();
        }
        holding.next(MAX_BATCH, |_, _| false)
    }

    /// One batch in one transaction, on the writer's connection.
    fn run(&self, batch: Vec<Queued>, own: &mut Option<Own<'_, '_>>) {
        let mut slot = self.conn.lock();
        let conn = match slot.take() {
            Some(conn) => conn,
            None => match pool::open(&self.path) {
                Ok(conn) => conn,
                Err(e) => return answer_all(batch, &e),
            },
        };
        let reusable = self.run_on(&conn, batch, own);
        if reusable && conn.is_autocommit() {
            *slot = Some(conn);
        }
    }

    /// Runs `batch` on `conn`; false if the connection should not be used again.
    fn run_on(&self, conn: &Connection, batch: Vec<Queued>, own: &mut Option<Own<'_, '_>>) -> bool {
        if let [_] = &batch[..] {
            // Alone: the plain transaction, no batch bookkeeping.
            let q = batch.into_iter().next().expect("one count");
            let done = count(conn, &self.sql, &q, own);
            let reusable = keeps_connection(&done);
            let _ = q.reply.send(done);
            return reusable;
        }
        if let Err(e) = conn.prepare_cached("BEGIN IMMEDIATE").and_then(|mut begin| begin.execute([])) {
            let reusable = is_busy(&e);
            answer_all(batch, &e);
            return reusable;
        }
        let mut written = Vec::with_capacity(batch.len());
        let mut waiting = batch;
        while !waiting.is_empty() {
            let (round, later) = one_round(waiting);
            waiting = later;
            match self.run_round(conn, round, own, &mut written) {
                Ok(()) => {}
                Err(again) => {
                    // A database error, maybe after some writes: undo the
                    // batch and run each count on its own.
                    let again = written.into_iter().chain(again).chain(waiting);
                    return match rollback(conn) {
                        Ok(()) => self.one_by_one(conn, again, own),
                        Err(e) => {
                            answer_all(again.collect(), &e);
                            false
                        }
                    };
                }
            }
        }
        match conn.prepare_cached("COMMIT").and_then(|mut commit| commit.execute([])) {
            Ok(_) => {
                self.batched.fetch_add(written.len() as u64, Ordering::Relaxed);
                for q in written {
                    let _ = q.reply.send(Ok(()));
                }
                true
            }
            Err(e) => {
                let reusable = rollback(conn).is_ok() && is_busy(&e);
                answer_all(written, &e);
                reusable
            }
        }
    }

    /// One round: reads the rows of every count, asks all their callers, then
    /// writes each answer. The counts written join `written`; on a database
    /// error the counts not yet settled come back to be run again.
    fn run_round(
        &self,
        conn: &Connection,
        round: Vec<Queued>,
        own: &mut Option<Own<'_, '_>>,
        written: &mut Vec<Queued>,
    ) -> Result<(), Vec<Queued>> {
        let mut asked = Vec::with_capacity(round.len());
        let mut round = round.into_iter();
        while let Some(q) = round.next() {
            let (rows, now) = match select(conn, &self.sql, &q.hashes) {
                Ok(read) => read,
                Err(_) => return Err(asked.into_iter().map(|(q, _, _)| q).chain([q]).chain(round).collect()),
            };
            match ask::ask(&q.asks, &rows, now) {
                Some(pending) => asked.push((q, rows, pending)),
                None => drop(q.reply.send(Err(ask::gone()))),
            }
        }
        if let Some(own) = own {
            own.serve();
        }
        let mut asked = asked.into_iter();
        while let Some((q, rows, pending)) = asked.next() {
            let writes = match pending.wait(q.until) {
                None => {
                    let _ = q.reply.send(Err(ask::gone()));
                    continue;
                }
                Some(Err(refused)) => {
                    let _ = q.reply.send(Err(Failure::Store(refused)));
                    continue;
                }
                Some(Ok(writes)) => writes,
            };
            match write(conn, &self.sql, &q.hashes, q.generation, &rows, writes) {
                Ok(()) => written.push(q),
                Err(Failure::Store(refused)) => drop(q.reply.send(Err(Failure::Store(refused)))),
                Err(_) => return Err([q].into_iter().chain(asked.map(|(q, _, _)| q)).collect()),
            }
        }
        Ok(())
    }

    /// Each count in a transaction of its own.
    fn one_by_one(
        &self,
        conn: &Connection,
        batch: impl Iterator<Item = Queued>,
        own: &mut Option<Own<'_, '_>>,
    ) -> bool {
        let mut reusable = true;
        for q in batch {
            let done = count(conn, &self.sql, &q, own);
            reusable &= keeps_connection(&done);
            let _ = q.reply.send(done);
        }
        reusable
    }
}

/// The counts of `waiting` that share no key with an earlier one, in order,
/// and the others, for a later round.
fn one_round(waiting: Vec<Queued>) -> (Vec<Queued>, Vec<Queued>) {
    let mut keys: SmallVec<[KeyHash; 16]> = SmallVec::new();
    let (mut round, mut later) = (Vec::with_capacity(waiting.len()), Vec::new());
    for q in waiting {
        if q.hashes.iter().any(|h| keys.contains(h)) {
            later.push(q);
        } else {
            keys.extend(q.hashes.iter().copied());
            round.push(q);
        }
    }
    (round, later)
}

/// A caller's wait for its writer's question or its count's result: spinning
/// while it is the only count waiting and the answer comes soon, then
/// yielding for a moment, then asleep.
async fn wait(asked: &mut Asked, done: &mut oneshot::Receiver<Result<(), Failure>>, soon: bool, alone: bool) -> Next {
    if soon && alone {
        // The only count waiting: nothing of this store needs the runtime
        // thread meanwhile, and a yield would wake an idle one.
        let start = Instant::now();
        while start.elapsed() < SPIN_ALONE {
            match ask::try_next(asked, done) {
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
            match ask::try_next(asked, done) {
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

/// Answers every count of `batch` with the failure `e` (nothing was written).
fn answer_all(batch: Vec<Queued>, e: &rusqlite::Error) {
    let reason = if is_busy(e) { Unavailable::Timeout } else { Unavailable::StoreFailed };
    for q in batch {
        let failed = StoreError::Unavailable {
            reason,
            detail: format!("database error while trying to count: {e}; nothing was written"),
            source: None,
        };
        let _ = q.reply.send(Err(Failure::Store(failed)));
    }
}

/// Rolls back the open transaction, if one is.
fn rollback(conn: &Connection) -> rusqlite::Result<()> {
    if conn.is_autocommit() {
        return Ok(());
    }
    conn.prepare_cached("ROLLBACK")?.execute([]).map(drop)
}

/// False after a database error other than busy: the connection is closed.
fn keeps_connection(done: &Result<(), Failure>) -> bool {
    match done {
        Err(Failure::Lite(e)) => is_busy(e),
        _ => true,
    }
}
