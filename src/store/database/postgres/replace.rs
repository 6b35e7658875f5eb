//! PostgreSQL's one-statement counts (see `last_seen.rs`), sent together under
//! load: a guess that replaces a remembered row, one that inserts the row of
//! a key this store has not seen, and the second try of a count whose guess
//! missed, from the row that guess read. While [`ALONE`] guesses are out in
//! statements of their own, or others already wait, the next ones wait and
//! go together, one row each in one statement, so one round trip and one
//! commit serve many counts. A few callers' guesses go at once, alone, as
//! they would without the queue: until the server is busy, statements side
//! by side count faster than a batch a caller must wait for.
//!
//! Each row is replaced only if it is still as remembered (or read) and the
//! database's clock is near the estimate its `apply` saw, exactly as for one
//! guess alone, and only if no other transaction holds it (`SKIP LOCKED`): a
//! replace never waits for a lock, so a busy row holds up no other count (a
//! guess alone may wait for its row; the next guesses then go in batches).
//! A row is inserted only if none is there; an insert may wait for another
//! transaction inserting the same key, in key order, so two batches'
//! inserts can't deadlock. A row that was not written answers with the row
//! and the clock as the statement found them, and its count goes on from
//! there on its own, as a missed guess does.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use sqlx::postgres::PgConnection;
use sqlx::Row;
use tokio::sync::oneshot;

use super::super::conns::Conns;
use super::super::queue::{Holding, Joined, Queue};
use super::super::row::{KeyHash, Stored};
use super::super::CALL_LIMIT;
use super::NOW;
use crate::server_clock::{MAX_LAG_MS, MAX_LEAD_MS};
use crate::Millis;

/// The most guesses one statement carries.
const MAX_BATCH: usize = 64;

/// Guesses out at once in statements of their own before the next ones wait
/// to go together. Up to 8 callers, each count goes alone, as pgbench's
/// clients do (a server that is not yet busy answers 8 statements side by
/// side faster than fewer, larger ones); beyond, the rest go in batches.
const ALONE: usize = 8;

/// One guess: replace `old` with the new value, if the row is still `old`;
/// with no `old`, insert it, unless a row is there.
#[derive(Debug)]
pub(super) struct Replace {
    pub(super) hash: KeyHash,
    pub(super) generation: i64,
    pub(super) value: String,
    pub(super) expires_at: Millis,
    /// The key's `family` column, for an insert.
    pub(super) family: i16,
    pub(super) old: Option<Stored>,
    /// The clock estimate `apply` was given; `None` for a second try from
    /// the row and the clock a statement just read, which, like any write
    /// after a read, is not checked against the clock.
    pub(super) est: Option<Millis>,
}

/// How a guess went.
#[derive(Debug)]
pub(super) enum Replaced {
    /// Written.
    Done { now: Millis },
    /// Not written: the row was not as remembered, the clock not as
    /// estimated, or the row locked; this is the row and the clock the
    /// statement saw.
    Missed { row: Option<Stored>, now: Millis },
    /// The statement was not run, or the database refused it whole: nothing
    /// was written, and there is no reading.
    NotSent,
}

/// How a batch statement failed, for each of its guesses.
#[derive(Debug)]
enum Failed {
    /// Nothing was written (the database answered with an error, or no
    /// connection was free): the guesses may go on without it.
    NothingWritten,
    /// The answer was lost: the rows may or may not have been written.
    Unknown(String),
}

type Reply = oneshot::Sender<Result<Replaced, Failed>>;

/// The guesses waiting to be sent, and the statement that sends them.
#[derive(Debug)]
pub(super) struct Replacer {
    pool: Conns<PgConnection>,
    /// The batch statement.
    sql: String,
    /// One batch statement out at a time.
    queue: Queue<(Replace, Reply)>,
    /// Guesses out alone now.
    alone: AtomicUsize,
    batched: AtomicU64,
}

/// A place among the [`ALONE`] guesses out on their own, given back when
/// dropped.
#[derive(Debug)]
pub(super) struct Alone<'a>(&'a AtomicUsize);

impl Drop for Alone<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Replacer {
    pub(super) fn new(pool: Conns<PgConnection>, table: &str) -> Arc<Self> {
        let t = table;
        let sql = format!(
            "WITH w AS (SELECT * FROM unnest($1::int4[], $2::bytea[], $3::int8[], $4::text[], $5::int8[], \
                                             $6::int8[], $7::text[], $8::int8[], $9::int8[], $10::int2[]) \
                        AS w(i, k, g, v, e, og, ov, oe, est, f)), \
             c AS (SELECT {NOW} AS now), \
             ok AS (SELECT * FROM w \
                    WHERE w.est IS NULL OR (SELECT now FROM c) BETWEEN w.est - {MAX_LEAD_MS} AND w.est + {MAX_LAG_MS}), \
             l AS (SELECT t.key_hash FROM {t} AS t JOIN ok ON t.key_hash = ok.k \
                   WHERE ok.og IS NOT NULL AND t.generation = ok.og AND t.value = ok.ov AND t.expires_at = ok.oe \
                   FOR UPDATE OF t SKIP LOCKED), \
             up AS (UPDATE {t} AS t SET generation = w.g, value = w.v, expires_at = w.e, family = w.f FROM w \
                    WHERE t.key_hash = w.k AND t.key_hash IN (SELECT key_hash FROM l) RETURNING w.i), \
             ins AS (INSERT INTO {t} (key_hash, generation, value, expires_at, family) \
                     SELECT k, g, v, e, f FROM ok \
                     WHERE og IS NULL AND NOT EXISTS (SELECT 1 FROM {t} AS x WHERE x.key_hash = ok.k) ORDER BY k \
                     ON CONFLICT (key_hash) DO NOTHING RETURNING key_hash) \
             SELECT w.i, (up.i IS NOT NULL OR ins.key_hash IS NOT NULL) AS done, (SELECT now FROM c) AS now, \
                    r.generation, r.value, r.expires_at \
             FROM w LEFT JOIN up ON up.i = w.i LEFT JOIN ins ON ins.key_hash = w.k \
                    LEFT JOIN {t} AS r ON r.key_hash = w.k"
        );
        Arc::new(Replacer { pool, sql, queue: Queue::new(), alone: AtomicUsize::new(0), batched: AtomicU64::new(0) })
    }

    /// Guesses sent in a statement with others so far.
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// A place to send a guess alone, if fewer than [`ALONE`] are out and no
    /// guess waits to go with others (a guess does not pass those).
    pub(super) fn alone(&self) -> Option<Alone<'_>> {
        if self.queue.has_waiting() {
            return None;
        }
        let mut n = self.alone.load(Ordering::Acquire);
        while n < ALONE {
            match self.alone.compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(Alone(&self.alone)),
                Err(now) => n = now,
            }
        }
        None
    }

    /// Sends `guess` in the next batch, from a task of the store's own, so
    /// a caller that stops waiting leaves the others' statement alone.
    pub(super) async fn replace(self: &Arc<Self>, guess: Replace) -> Result<Replaced, String> {
        let (reply, answer) = oneshot::channel();
        if let Joined::Run(first) = self.queue.join((guess, reply)) {
            let holding = Holding::new(self.clone(), |r: &Replacer| &r.queue);
            tokio::spawn(self.clone().drain(vec![first], holding));
        }
        match answer.await {
            Ok(Ok(replaced)) => Ok(replaced),
            Ok(Err(Failed::NothingWritten)) => Ok(Replaced::NotSent),
            Ok(Err(Failed::Unknown(why))) => Err(why),
            Err(_) => Err("the statement carrying this count was dropped; it may have been written".into()),
        }
    }

    /// Sends batches until none waits.
    async fn drain(
        self: Arc<Self>,
        mut batch: Vec<(Replace, Reply)>,
        mut holding: Holding<Replacer, (Replace, Reply)>,
    ) {
        loop {
            self.send(batch).await;
            match holding.next(MAX_BATCH, |batch, (guess, _)| batch.iter().any(|(g, _)| g.hash == guess.hash)) {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// One statement for `batch`, and every guess answered. A guess whose
    /// caller stopped waiting is not sent: it counts nothing.
    async fn send(&self, batch: Vec<(Replace, Reply)>) {
        let (guesses, replies): (Vec<_>, Vec<_>) = batch.into_iter().filter(|(_, reply)| !reply.is_closed()).unzip();
        let n = guesses.len();
        if n == 0 {
            return;
        }
        match tokio::time::timeout(CALL_LIMIT, self.run(&guesses)).await {
            Ok(Ok(answers)) => {
                let sent = answers.iter().filter(|a| !matches!(a, Replaced::NotSent)).count();
                if sent > 1 {
                    self.batched.fetch_add(sent as u64, Ordering::Relaxed);
                }
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(Err(e)) => {
                let nothing_written = matches!(e, sqlx::Error::Database(_) | sqlx::Error::PoolTimedOut);
                for reply in replies {
                    let failed = match nothing_written {
                        true => Failed::NothingWritten,
                        false => Failed::Unknown(format!("database error while trying to count: {e}")),
                    };
                    let _ = reply.send(Err(failed));
                }
            }
            Err(_) => {
                for reply in replies {
                    let why = format!("the database gave no answer within {CALL_LIMIT:?}; the count was dropped");
                    let _ = reply.send(Err(Failed::Unknown(why)));
                }
            }
        }
    }

    /// Runs the statement; one answer per guess, in order.
    async fn run(&self, guesses: &[Replace]) -> Result<Vec<Replaced>, sqlx::Error> {
        let n = guesses.len();
        let mut conn = match self.pool.acquire().await {
            Ok(conn) => conn,
            // Not sent: the guesses go on alone, and meet the error there.
            Err(_) => return Ok((0..n).map(|_| Replaced::NotSent).collect()),
        };
        let index: Vec<i32> = (0..i32::try_from(n).unwrap_or(i32::MAX)).collect();
        let column = |f: &dyn Fn(&Replace) -> i64| guesses.iter().map(f).collect::<Vec<i64>>();
        let text = |f: &dyn Fn(&Replace) -> &str| guesses.iter().map(|g| f(g).to_owned()).collect::<Vec<String>>();
        let old = |f: &dyn Fn(&Stored) -> i64| guesses.iter().map(|g| g.old.as_ref().map(f)).collect::<Vec<_>>();
        let found = sqlx::query(&self.sql)
            .bind(index)
            .bind(guesses.iter().map(|g| g.hash.to_vec()).collect::<Vec<_>>())
            .bind(column(&|g| g.generation))
            .bind(text(&|g| &g.value))
            .bind(column(&|g| g.expires_at))
            .bind(old(&|o| o.generation))
            .bind(guesses.iter().map(|g| g.old.as_ref().map(|o| o.value.clone())).collect::<Vec<_>>())
            .bind(old(&|o| o.expires_at))
            .bind(guesses.iter().map(|g| g.est).collect::<Vec<_>>())
            .bind(guesses.iter().map(|g| g.family).collect::<Vec<i16>>())
            .fetch_all(&mut *conn)
            .await?;
        conn.release();
        let mut answers: Vec<Replaced> = (0..n).map(|_| Replaced::NotSent).collect();
        for row in found {
            let i: i32 = row.try_get("i")?;
            let now: Millis = row.try_get("now")?;
            let answer = if row.try_get("done")? {
                Replaced::Done { now }
            } else {
                let generation: Option<i64> = row.try_get("generation")?;
                let value: Option<String> = row.try_get("value")?;
                let expires_at: Option<i64> = row.try_get("expires_at")?;
                let row = match (generation, value, expires_at) {
                    (Some(generation), Some(value), Some(expires_at)) => Some(Stored { generation, value, expires_at }),
                    _ => None,
                };
                Replaced::Missed { row, now }
            };
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| answers.get_mut(i)) {
                *slot = answer;
            }
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use sqlx::postgres::PgPool;
    use sqlx::{Connection, Executor};

    use super::super::super::conns::no_init;
    use super::*;

    fn stored(n: i64) -> Stored {
        Stored { generation: 1, value: n.to_string(), expires_at: 9_000_000_000_000 }
    }

    fn guess(key: u8, old: Option<Stored>, est: Millis) -> Replace {
        let value = (old.as_ref().map_or(0, |o| o.value.parse::<i64>().unwrap()) + 1).to_string();
        let expires_at = old.as_ref().map_or(9_000_000_000_000, |o| o.expires_at);
        Replace { hash: [key; 32], generation: 1, value, expires_at, family: 0, old, est: Some(est) }
    }

    /// One batch statement: the row still as remembered is written, and a
    /// missing row inserted; a row that changed, a missing row to replace,
    /// a row another transaction holds, a row to insert that is there, and
    /// guesses on a wrong clock estimate are not, and come back as the
    /// statement found them, without waiting for the held row.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_writes_exactly_the_rows_still_as_remembered() {
        let Some(url) = super::super::test_server() else { return };
        let table = format!("ls_replace_{}", std::process::id());
        crate::DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let pool = PgPool::connect(&url).await.unwrap();
        for key in [1u8, 2, 4, 5, 7] {
            sqlx::query(&format!("INSERT INTO {table} VALUES ($1, 1, '10', 9000000000000)"))
                .bind(vec![key; 32])
                .execute(&pool)
                .await
                .unwrap();
        }
        let mut holder = sqlx::PgConnection::connect(&url).await.unwrap();
        holder.execute("BEGIN").await.unwrap();
        sqlx::query(&format!("SELECT 1 FROM {table} WHERE key_hash = $1 FOR UPDATE"))
            .bind(vec![4u8; 32])
            .execute(&mut holder)
            .await
            .unwrap();

        let est: Millis = sqlx::query_scalar(&format!("SELECT {NOW}")).fetch_one(&pool).await.unwrap();
        let conns = Conns::open(url.parse().unwrap(), no_init, 2, std::time::Duration::from_secs(1)).await.unwrap();
        let replacer = Replacer::new(conns, &table);
        let guesses = [
            guess(1, Some(stored(10)), est),          // as remembered
            guess(2, Some(stored(9)), est),           // changed since
            guess(3, Some(stored(10)), est),          // no row at all
            guess(4, Some(stored(10)), est),          // held by another transaction
            guess(5, Some(stored(10)), est - 10_000), // the clock estimate 10 s behind
            guess(6, None, est),                      // no row, none remembered: inserted
            guess(7, None, est),                      // a row this store never saw
            guess(8, None, est - 10_000),             // no row, but the clock estimate 10 s behind
        ];
        let started = std::time::Instant::now();
        let answers = replacer.run(&guesses).await.unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "the held row was skipped, not waited for");
        holder.execute("ROLLBACK").await.unwrap();

        assert!(matches!(answers[0], Replaced::Done { .. }), "{:?}", answers[0]);
        let Replaced::Missed { row: Some(row), .. } = &answers[1] else { panic!("{:?}", answers[1]) };
        assert_eq!(row.value, "10", "a miss answers the row as it is");
        assert!(matches!(answers[2], Replaced::Missed { row: None, .. }), "{:?}", answers[2]);
        assert!(matches!(answers[3], Replaced::Missed { row: Some(_), .. }), "{:?}", answers[3]);
        assert!(matches!(answers[4], Replaced::Missed { row: Some(_), .. }), "{:?}", answers[4]);
        assert!(matches!(answers[5], Replaced::Done { .. }), "{:?}", answers[5]);
        let Replaced::Missed { row: Some(row), .. } = &answers[6] else { panic!("{:?}", answers[6]) };
        assert_eq!(row.value, "10", "an insert that finds a row answers it, for the count's second try");
        assert!(matches!(answers[7], Replaced::Missed { row: None, .. }), "{:?}", answers[7]);

        let values: Vec<(Vec<u8>, String)> =
            sqlx::query_as(&format!("SELECT key_hash, value FROM {table} ORDER BY key_hash"))
                .fetch_all(&pool)
                .await
                .unwrap();
        let values: Vec<(u8, &str)> = values.iter().map(|(k, v)| (k[0], v.as_str())).collect();
        assert_eq!(
            values,
            [(1, "11"), (2, "10"), (4, "10"), (5, "10"), (6, "1"), (7, "10")],
            "only the row as remembered, and the missing row on a good clock, were written"
        );
        for t in [table.clone(), format!("{table}_migrations")] {
            sqlx::query(&format!("DROP TABLE {t}")).execute(&pool).await.unwrap();
        }
    }
}
