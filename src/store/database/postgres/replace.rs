//! PostgreSQL's one-statement counts on remembered rows (see `seen.rs`), sent
//! together under load: while [`IN_FLIGHT`] statements are out, the next
//! guesses wait and go in one statement, one row each, so one round trip and
//! one commit serve many counts. A lone caller's guess goes at once, alone.
//!
//! Each row is written only if it is still as remembered and the database's
//! clock is near the estimate its `apply` saw, exactly as for one guess
//! alone, and only if no other transaction holds it (`SKIP LOCKED`): the
//! statement never waits for a lock, so one busy row can hold up no other
//! count, and two instances' statements can't deadlock. A row that was not
//! written answers with the row and the clock as the statement found them,
//! and its count goes on from there on its own, as a missed guess does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::postgres::PgPool;
use sqlx::Row;
use tokio::sync::oneshot;

use super::super::queue::{Joined, Queue};
use super::super::row::{KeyHash, Stored};
use super::super::seen::{MAX_LAG_MS, MAX_LEAD_MS};
use super::super::CALL_LIMIT;
use super::NOW;
use crate::Millis;

/// The most guesses one statement carries.
const MAX_BATCH: usize = 64;

/// Statements out at once before the next guesses wait to go together.
const IN_FLIGHT: usize = 2;

/// One guess: replace `old` with the new value, if the row is still `old`.
#[derive(Debug)]
pub(super) struct Replace {
    pub(super) hash: KeyHash,
    pub(super) generation: i64,
    pub(super) value: String,
    pub(super) expires_at: Millis,
    pub(super) old: Stored,
    /// The clock estimate `apply` was given.
    pub(super) est: Millis,
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
    pool: PgPool,
    /// For one guess alone.
    one: String,
    /// For several.
    sql: String,
    queue: Queue<(Replace, Reply)>,
    batched: AtomicU64,
}

impl Replacer {
    pub(super) fn new(pool: PgPool, table: &str) -> Arc<Self> {
        let t = table;
        let one = format!(
            "WITH c AS (SELECT {NOW} AS now), \
             up AS (UPDATE {t} SET generation = $2, value = $3, expires_at = $4 \
                    WHERE key_hash = $1 AND generation = $5 AND value = $6 AND expires_at = $7 \
                      AND (SELECT now FROM c) BETWEEN $8::int8 - {MAX_LEAD_MS} AND $8::int8 + {MAX_LAG_MS} \
                      AND key_hash IN (SELECT key_hash FROM {t} WHERE key_hash = $1 FOR UPDATE SKIP LOCKED) \
                    RETURNING 1) \
             SELECT 0::int4 AS i, EXISTS (SELECT 1 FROM up) AS done, (SELECT now FROM c) AS now, \
                    r.generation, r.value, r.expires_at \
             FROM (SELECT 1) AS one LEFT JOIN {t} AS r ON r.key_hash = $1"
        );
        let sql = format!(
            "WITH w AS (SELECT * FROM unnest($1::int4[], $2::bytea[], $3::int8[], $4::text[], $5::int8[], \
                                             $6::int8[], $7::text[], $8::int8[], $9::int8[]) \
                        AS w(i, k, g, v, e, og, ov, oe, est)), \
             c AS (SELECT {NOW} AS now), \
             l AS (SELECT t.key_hash FROM {t} AS t JOIN w ON t.key_hash = w.k \
                   WHERE t.generation = w.og AND t.value = w.ov AND t.expires_at = w.oe \
                     AND (SELECT now FROM c) BETWEEN w.est - {MAX_LEAD_MS} AND w.est + {MAX_LAG_MS} \
                   FOR UPDATE OF t SKIP LOCKED), \
             up AS (UPDATE {t} AS t SET generation = w.g, value = w.v, expires_at = w.e FROM w \
                    WHERE t.key_hash = w.k AND t.key_hash IN (SELECT key_hash FROM l) RETURNING w.i) \
             SELECT w.i, (up.i IS NOT NULL) AS done, (SELECT now FROM c) AS now, \
                    r.generation, r.value, r.expires_at \
             FROM w LEFT JOIN up ON up.i = w.i LEFT JOIN {t} AS r ON r.key_hash = w.k"
        );
        Arc::new(Replacer { pool, one, sql, queue: Queue::new(IN_FLIGHT), batched: AtomicU64::new(0) })
    }

    /// Guesses sent in a statement with others so far.
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Sends `guess` now, or with the next batch if every place is taken;
    /// always from a task of the store's own, so a caller that stops
    /// waiting leaves the others' statement alone.
    pub(super) async fn replace(self: &Arc<Self>, guess: Replace) -> Result<Replaced, String> {
        let (reply, answer) = oneshot::channel();
        if let Joined::Run(first) = self.queue.join((guess, reply)) {
            tokio::spawn(self.clone().drain(vec![first]));
        }
        match answer.await {
            Ok(Ok(replaced)) => Ok(replaced),
            Ok(Err(Failed::NothingWritten)) => Ok(Replaced::NotSent),
            Ok(Err(Failed::Unknown(why))) => Err(why),
            Err(_) => Err("the statement carrying this count was dropped; it may have been written".into()),
        }
    }

    /// Sends batches until none waits.
    async fn drain(self: Arc<Self>, mut batch: Vec<(Replace, Reply)>) {
        loop {
            self.send(batch).await;
            match self.next() {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// The next batch: distinct keys, oldest first.
    fn next(&self) -> Option<Vec<(Replace, Reply)>> {
        self.queue.next(MAX_BATCH, |batch, (guess, _)| batch.iter().any(|(g, _)| g.hash == guess.hash))
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
                if n > 1 {
                    self.batched.fetch_add(n as u64, Ordering::Relaxed);
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
        let found = if let [g] = guesses {
            sqlx::query(&self.one)
                .bind(&g.hash[..])
                .bind(g.generation)
                .bind(&g.value)
                .bind(g.expires_at)
                .bind(g.old.generation)
                .bind(&g.old.value)
                .bind(g.old.expires_at)
                .bind(g.est)
                .fetch_all(&self.pool)
                .await?
        } else {
            let index: Vec<i32> = (0..i32::try_from(n).unwrap_or(i32::MAX)).collect();
            let column = |f: &dyn Fn(&Replace) -> i64| guesses.iter().map(f).collect::<Vec<i64>>();
            let text = |f: &dyn Fn(&Replace) -> &str| guesses.iter().map(|g| f(g).to_owned()).collect::<Vec<String>>();
            sqlx::query(&self.sql)
                .bind(index)
                .bind(guesses.iter().map(|g| g.hash.to_vec()).collect::<Vec<_>>())
                .bind(column(&|g| g.generation))
                .bind(text(&|g| &g.value))
                .bind(column(&|g| g.expires_at))
                .bind(column(&|g| g.old.generation))
                .bind(text(&|g| &g.old.value))
                .bind(column(&|g| g.old.expires_at))
                .bind(column(&|g| g.est))
                .fetch_all(&self.pool)
                .await?
        };
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
