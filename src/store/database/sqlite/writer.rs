//! The SQLite store's writer (its callers' side is `caller.rs`): counts go
//! through one [`Queue`], and whoever holds it busy runs the waiting counts
//! together, one `BEGIN IMMEDIATE` transaction per batch, on a connection
//! taken from the store's [`Pool`] for the batch. SQLite takes one writer at a time anyway; this way the
//! counts of one instance take turns without a trip through SQLite's busy
//! handler each, and one commit serves a whole batch.
//!
//! A batch runs in rounds. A round takes the waiting counts that share no key
//! with each other, reads their rows, asks each count's caller to decide
//! ([`ask`]: by message, never through the caller's borrowed closure; or runs
//! the count's own `decide`, when the count owns it), and writes the answers;
//! the next round reads after those writes. So every count sees the ones before
//! it, and the batch is what running them one at a time would give, while the
//! callers decide side by side. A count whose `decide` refuses, or whose caller
//! stopped waiting, writes nothing and the others go on; a database error
//! part-way rolls the batch back and runs its counts again one transaction each.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::Connection;
use smallvec::SmallVec;
use tokio::sync::oneshot;

use super::super::error::{is_busy, Failure};
use super::super::queue::{Holding, Queue};
use super::super::row::{KeyHash, Stored};
use super::ask::{self, Decider, Pending};
use super::pool::{Pool, LINGER};
use super::{count, select, write, Statements, WAIT};
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// The most counts one transaction takes: enough to serve every caller of a
/// busy instance in one commit, few enough to keep the write lock short.
const MAX_BATCH: usize = 64;

/// How long the writer waits for a caller's answer, from when the count was
/// queued: the store's own bound on a count, as the busy timeout is.
const ANSWER_WITHIN: Duration = WAIT;

/// One count waiting for the writer.
pub(super) struct Queued {
    pub(super) hashes: SmallVec<[KeyHash; 4]>,
    pub(super) generation: i64,
    /// How it is decided: by asking its caller, or by its own `decide`.
    decider: Decider,
    /// When the writer stops waiting for its caller's answer.
    pub(super) until: Instant,
    reply: oneshot::Sender<Result<(), Failure>>,
}

impl Queued {
    /// A count of the rows of `hashes`, decided by `decider` and answered
    /// through `reply`; the writer waits for its caller's answer until
    /// [`ANSWER_WITHIN`] from now.
    pub(super) fn new(
        hashes: &[KeyHash],
        generation: i64,
        decider: Decider,
        reply: oneshot::Sender<Result<(), Failure>>,
    ) -> Self {
        Queued { hashes: hashes.into(), generation, decider, until: Instant::now() + ANSWER_WITHIN, reply }
    }

    /// Asks its caller to decide on `rows` at `now`, or decides with its own
    /// `decide` while its caller waits; `None` when the caller is gone.
    pub(super) fn ask(&self, rows: &[Option<Stored>], now: Millis) -> Option<Pending> {
        ask::ask(&self.decider, !self.reply.is_closed(), rows, now)
    }
}

impl std::fmt::Debug for Queued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queued").field("keys", &self.hashes.len()).finish_non_exhaustive()
    }
}

/// The queue of counts, and where the connection that runs them comes from.
#[derive(Debug)]
pub(super) struct Writer {
    /// The store's connections: the holder of the busy queue takes one for
    /// each batch, outside the pool's count of calls (the writer is one).
    conns: Arc<Pool>,
    sql: Arc<Statements>,
    pub(super) queue: Queue<Queued>,
    /// Counts committed in a batch with others.
    batched: AtomicU64,
    /// Counts waiting for their answer now.
    pub(super) callers: AtomicUsize,
}

impl Writer {
    pub(super) fn new(conns: Arc<Pool>, sql: Arc<Statements>) -> Arc<Self> {
        Arc::new(Writer { conns, sql, queue: Queue::new(), batched: AtomicU64::new(0), callers: AtomicUsize::new(0) })
    }

    /// Counts committed in a batch with others so far.
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Runs `batch` and the batches that wait after it until the queue is
    /// empty (on a blocking thread).
    pub(super) fn drain(&self, mut batch: Vec<Queued>, mut holding: Holding<Writer, Queued>) {
        loop {
            // After a panic, the batch's replies were dropped, so its callers
            // are answered; its connection, maybe mid-transaction, was closed.
            let _ = catch_unwind(AssertUnwindSafe(|| self.run(batch)));
            let Some(next) = self.next_batch(&mut holding) else { return };
            batch = next;
        }
    }

    /// The next batch, after waiting up to [`LINGER`] for one; `None` (and the
    /// queue idle) if none came.
    fn next_batch(&self, holding: &mut Holding<Writer, Queued>) -> Option<Vec<Queued>> {
        let start = Instant::now();
        while !self.queue.has_waiting() && start.elapsed() < LINGER {
            std::thread::yield_now();
        }
        holding.next(MAX_BATCH, |_, _| false)
    }

    /// One batch in one transaction, on a connection of the pool.
    fn run(&self, batch: Vec<Queued>) {
        let conn = match self.conns.take() {
            Ok(conn) => conn,
            Err(e) => return answer_all(batch, &e),
        };
        if self.run_on(&conn, batch) {
            self.conns.give_back(conn);
        }
    }

    /// Runs `batch` on `conn`; false if the connection should not be used again.
    fn run_on(&self, conn: &Connection, batch: Vec<Queued>) -> bool {
        if let [_] = &batch[..] {
            // Alone: the plain transaction, no batch bookkeeping.
            let q = batch.into_iter().next().expect("one count");
            let done = count(conn, &self.sql, &q);
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
            match self.run_round(conn, round, &mut written) {
                Ok(()) => {}
                Err(again) => {
                    // A database error, maybe after some writes: undo the
                    // batch and run each count on its own.
                    let again = written.into_iter().chain(again).chain(waiting);
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

    /// One round: reads the rows of every count, asks all their callers, then
    /// writes each answer. The counts written join `written`; on a database
    /// error the counts not yet settled come back to be run again.
    fn run_round(&self, conn: &Connection, round: Vec<Queued>, written: &mut Vec<Queued>) -> Result<(), Vec<Queued>> {
        let mut asked = Vec::with_capacity(round.len());
        let mut round = round.into_iter();
        while let Some(q) = round.next() {
            let (rows, now) = match select(conn, &self.sql, &q.hashes) {
                Ok(read) => read,
                Err(_) => return Err(asked.into_iter().map(|(q, _, _)| q).chain([q]).chain(round).collect()),
            };
            match q.ask(&rows, now) {
                Some(pending) => asked.push((q, rows, pending)),
                None => drop(q.reply.send(Err(ask::gone()))),
            }
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
    fn one_by_one(&self, conn: &Connection, batch: impl Iterator<Item = Queued>) -> bool {
        let mut reusable = true;
        for q in batch {
            let done = count(conn, &self.sql, &q);
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
