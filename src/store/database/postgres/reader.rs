//! PostgreSQL's reads for counts that could not guess (no place for a guess
//! alone on a busy server, or no clock estimate yet), sent together: a count
//! that finds no read out sends its own at once; the ones that come while a
//! read is out wait and go in the next statement, one key each, so under
//! load one round trip reads many rows. The statement is the store's usual
//! read (the rows by key, and the database's clock): it writes nothing and
//! takes no lock, and each count then writes only if its row is still as
//! read (see `optimistic.rs`), so counts stay exact whatever they read together.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::postgres::PgConnection;
use tokio::sync::oneshot;

use super::super::conns::Conns;
use super::super::queue::{Holding, Joined, Queue};
use super::super::row::{KeyHash, Stored};
use super::super::CALL_LIMIT;
use crate::Millis;

/// The most keys one read carries.
const MAX_BATCH: usize = 64;

/// A key's row (if any) and the database's clock when it was read.
pub(super) type Read = (Option<Stored>, Millis);

type Reply = oneshot::Sender<Option<Read>>;

/// Reads rows for counts, together while one is out.
#[derive(Debug)]
pub(super) struct Reader {
    pool: Conns<PgConnection>,
    /// The store's read: `$1` the keys; `now` and each row found.
    sql: String,
    queue: Queue<(KeyHash, Reply)>,
    /// Rows read in a statement with others'.
    together: AtomicU64,
}

impl Reader {
    /// Reads with `sql` (the store's read) on `pool`.
    pub(super) fn new(pool: Conns<PgConnection>, sql: String) -> Arc<Self> {
        Arc::new(Reader { pool, sql, queue: Queue::new(), together: AtomicU64::new(0) })
    }

    /// Rows read in a statement with others' so far.
    pub(super) fn together(&self) -> u64 {
        self.together.load(Ordering::Relaxed)
    }

    /// `hash`'s row and the clock, read with the others waiting; `None` when
    /// the read failed or gave no answer in time (the caller reads alone,
    /// and meets the error there).
    pub(super) async fn read(self: &Arc<Self>, hash: KeyHash) -> Option<Read> {
        let (reply, answer) = oneshot::channel();
        if let Joined::Run(first) = self.queue.join((hash, reply)) {
            let holding = Holding::new(self.clone(), |r: &Reader| &r.queue);
            // A task of the store's own, so a caller that stops waiting
            // leaves the others' read alone.
            tokio::spawn(self.clone().drain(vec![first], holding));
        }
        answer.await.ok().flatten()
    }

    /// Sends reads until none waits.
    async fn drain(self: Arc<Self>, mut batch: Vec<(KeyHash, Reply)>, mut holding: Holding<Reader, (KeyHash, Reply)>) {
        loop {
            self.send(batch).await;
            match holding.next(MAX_BATCH, |batch, (hash, _)| batch.iter().any(|(h, _)| h == hash)) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// One statement for `batch`, each caller answered (with `None` if it failed).
    async fn send(&self, batch: Vec<(KeyHash, Reply)>) {
        let (hashes, replies): (Vec<_>, Vec<_>) = batch.into_iter().filter(|(_, reply)| !reply.is_closed()).unzip();
        if hashes.is_empty() {
            return;
        }
        // On an error or no answer in time, dropping the replies answers `None`.
        if let Ok(Ok((rows, now))) = tokio::time::timeout(CALL_LIMIT, self.run(&hashes)).await {
            if rows.len() > 1 {
                self.together.fetch_add(rows.len() as u64, Ordering::Relaxed);
            }
            for (reply, row) in replies.into_iter().zip(rows) {
                let _ = reply.send(Some((row, now)));
            }
        }
    }

    async fn run(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let read = super::select_rows(&mut conn, &self.sql, hashes).await?;
        conn.release();
        Ok(read)
    }
}
