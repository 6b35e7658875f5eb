//! The SQLite store's writer: counts go through one [`Queue`], and whoever
//! holds it busy runs the waiting counts together, one `BEGIN IMMEDIATE`
//! transaction per batch, on a connection of the writer's own. SQLite takes
//! one writer at a time anyway; this way the counts of one instance take
//! turns without a trip through SQLite's busy handler each, and one commit
//! serves a whole batch.
//!
//! Inside a batch every count is its own read, `decide`, write, in turn, so
//! each sees the ones before it: the batch is what running them one at a
//! time would give. A count whose `decide` refuses, or whose caller stopped
//! waiting, writes nothing and the others go on; a database error part-way
//! rolls the batch back and runs its counts again one transaction each.

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
use super::super::queue::{Joined, Queue};
use super::super::row::KeyHash;
use super::{count, pool, read_decide_write, LentDecide, Statements};
use crate::error::Unavailable;
use crate::StoreError;

/// The most counts one transaction takes: enough to serve every caller of a
/// busy instance in one commit, few enough to keep the write lock short.
const MAX_BATCH: usize = 64;

/// One count waiting for the writer.
pub(super) struct Queued {
    hashes: SmallVec<[KeyHash; 4]>,
    generation: i64,
    decide: LentDecide,
    reply: oneshot::Sender<Result<(), Failure>>,
    /// Where the caller's log lines go (the bound's lines come from `decide`).
    dispatch: tracing::Dispatch,
    span: tracing::Span,
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

    /// Runs one count in the writer's next batch and answers how it went.
    pub(super) async fn count(
        self: &Arc<Self>,
        hashes: &[KeyHash],
        generation: i64,
        decide: LentDecide,
    ) -> Result<(), Failure> {
        let (reply, answer) = oneshot::channel();
        let queued = Queued {
            hashes: hashes.into(),
            generation,
            decide,
            reply,
            dispatch: tracing::dispatcher::get_default(tracing::Dispatch::clone),
            span: tracing::Span::current(),
        };
        let joined = self.queue.join(queued);
        // Alone, or next in line: the answer comes soon.
        let soon = matches!(joined, Joined::Run(_) | Joined::Waiting(0));
        if let Joined::Run(first) = joined {
            let in_place = self.in_place
                && tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
            if in_place {
                // No hop to another thread and back: this worker runs the
                // batch while the runtime moves its other tasks elsewhere.
                tokio::task::block_in_place(|| self.drain(vec![first], Some(IN_PLACE_BATCHES)));
            } else {
                let writer = self.clone();
                tokio::task::spawn_blocking(move || writer.drain(vec![first], None));
            }
        }
        let mut answer = answer;
        let callers = Callers::enter(&self.callers);
        if soon && callers.alone() {
            // The only count waiting: nothing of this store needs the
            // runtime thread meanwhile, and a yield would wake an idle one.
            let start = Instant::now();
            while start.elapsed() < SPIN_ALONE {
                match answer.try_recv() {
                    Ok(done) => return done,
                    Err(oneshot::error::TryRecvError::Empty) => std::hint::spin_loop(),
                    Err(oneshot::error::TryRecvError::Closed) => break,
                }
            }
        }
        if soon {
            // Stay runnable for a moment instead of letting this worker
            // park: waking a parked thread costs more than the count. Other
            // tasks on the worker still run in between.
            let start = Instant::now();
            while start.elapsed() < LINGER {
                match answer.try_recv() {
                    Ok(done) => return done,
                    Err(oneshot::error::TryRecvError::Empty) => tokio::task::yield_now().await,
                    Err(oneshot::error::TryRecvError::Closed) => break,
                }
            }
        }
        match answer.await {
            Ok(done) => done,
            Err(_) => Err(Failure::Store(StoreError::unavailable(
                Unavailable::StoreFailed,
                "the SQLite writer stopped before it answered this count (a panic in it, or the runtime shutting \
                 down); it may not have been written",
            ))),
        }
    }

    /// Runs `batch` and the batches that wait after it until the queue is
    /// empty; after `limit` batches, hands the rest to a blocking thread.
    fn drain(self: &Arc<Self>, mut batch: Vec<Queued>, limit: Option<usize>) {
        let mut ran = 0;
        loop {
            if catch_unwind(AssertUnwindSafe(|| self.run(batch))).is_err() {
                // The batch's replies were dropped, so its callers are answered;
                // the connection may be mid-transaction: open a new one.
                *self.conn.lock() = None;
            }
            ran += 1;
            let Some(next) = self.next_batch() else { return };
            if limit.is_some_and(|limit| ran >= limit) {
                let writer = self.clone();
                tokio::task::spawn_blocking(move || writer.drain(next, None));
                return;
            }
            batch = next;
        }
    }

    /// The next batch, after waiting up to [`LINGER`] for one; `None` (and the
    /// queue idle) if none came.
    fn next_batch(&self) -> Option<Vec<Queued>> {
        let start = Instant::now();
        while !self.in_place && !self.queue.has_waiting() && start.elapsed() < LINGER {
            std::thread::yield_now();
        }
        self.queue.next(MAX_BATCH, |_, _| false)
    }

    /// One batch in one transaction, on the writer's connection.
    fn run(&self, batch: Vec<Queued>) {
        let mut slot = self.conn.lock();
        let conn = match slot.take() {
            Some(conn) => conn,
            None => match pool::open(&self.path) {
                Ok(conn) => conn,
                Err(e) => return answer_all(batch, &e),
            },
        };
        let reusable = self.run_on(&conn, batch);
        if reusable && conn.is_autocommit() {
            *slot = Some(conn);
        }
    }

    /// Runs `batch` on `conn`; false if the connection should not be used again.
    fn run_on(&self, conn: &Connection, batch: Vec<Queued>) -> bool {
        if let [_] = &batch[..] {
            // Alone: the plain transaction, no batch bookkeeping.
            let q = batch.into_iter().next().expect("one count");
            let done = q.in_scope(|| count(conn, &self.sql, &q.hashes, q.generation, &q.decide));
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
        let mut rest = batch.into_iter();
        while let Some(q) = rest.next() {
            match q.in_scope(|| read_decide_write(conn, &self.sql, &q.hashes, q.generation, &q.decide)) {
                Ok(()) => written.push(q),
                // Refused, or its caller is gone: it wrote nothing; the others go on.
                Err(Failure::Store(e)) => {
                    let _ = q.reply.send(Err(Failure::Store(e)));
                }
                Err(_) => {
                    // A database error, maybe after some of this count's
                    // writes: undo the batch and run each count on its own.
                    let again = written.into_iter().chain([q]).chain(rest);
                    return match rollback(conn) {
                        Ok(()) => self.one_by_one(conn, again),
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

    /// Each count in a transaction of its own.
    fn one_by_one(&self, conn: &Connection, batch: impl Iterator<Item = Queued>) -> bool {
        let mut reusable = true;
        for q in batch {
            let done = q.in_scope(|| count(conn, &self.sql, &q.hashes, q.generation, &q.decide));
            reusable &= keeps_connection(&done);
            let _ = q.reply.send(done);
        }
        reusable
    }
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

impl Queued {
    /// Runs `f` where the caller's log lines go.
    fn in_scope<T>(&self, f: impl FnOnce() -> T) -> T {
        tracing::dispatcher::with_default(&self.dispatch, || self.span.in_scope(f))
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
