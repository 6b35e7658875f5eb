//! PostgreSQL: the rows of an update are locked by one `INSERT … ON CONFLICT
//! DO UPDATE … RETURNING` that creates a missing row locked, so a key's first
//! update is serialized like any other; the same statement reads the rows and
//! `clock_timestamp()`. The writes go in one statement, then `COMMIT`.
//!
//! A one-key count first tries one statement from the row this store
//! remembers and its estimate of the database's clock (`seen.rs`): a writing
//! `WITH` that writes only if both hold, and reads the row and the clock as
//! they were before it. On a miss, that read is the first half of the
//! optimistic path (a write only if the row is still as read); if the row
//! changed again, the locked transaction settles it. Under load, the
//! guesses that replace a row go several to a statement ([`Replacer`]).
//!
//! The store's sessions plan their statements once (`plan_cache_mode =
//! force_generic_plan`, PostgreSQL 12 or later): the batch statement's custom
//! plans cost more to make than to run.

mod replace;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Row};

use super::attempt::{Attempts, Guess, Tried};
use super::chores::{chores, latest_now, match_rows, optimistic};
use super::conns::{no_init, Conns};
use super::error::{db_error, Failure};
use super::migrate::{self, POSTGRES};
use super::row::{row_after, Conditional, Decide, KeyHash, RowWrite, Stored};
use super::sweep::BATCH;
use crate::error::Unavailable;
use crate::seen::Seen;
use crate::server_clock::{ServerClock, MAX_LAG_MS, MAX_LEAD_MS};
use crate::{Millis, StoreError};

use self::replace::{Replace, Replaced, Replacer};

const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::int8";

#[derive(Debug)]
pub(super) struct Postgres {
    pool: Conns<PgConnection>,
    table: String,
    url_hint: String,
    lock: String,
    write: String,
    read: String,
    sweep: String,
    insert_new: String,
    replace_if: String,
    delete_if: String,
    guess: Guesses,
    replacer: Arc<Replacer>,
    seen: Seen<Stored>,
    clock: ServerClock,
}

/// The one-statement tries (see `seen.rs`). Each writes only if the row is
/// as remembered and the clock within bounds of the estimate `apply` was
/// given, and answers `done` with the row and the clock as they were before
/// it, so a miss is also the read the count needs next.
#[derive(Debug)]
struct Guesses {
    /// No row remembered: insert, unless a row is there.
    insert: String,
    /// Replace the remembered row (alone; see [`Replacer`] for the rest).
    replace: String,
    /// Delete the remembered row.
    delete: String,
    /// Nothing to write: confirm the row is as remembered.
    keep: String,
    /// Nothing to write and no row remembered: confirm there is none.
    keep_absent: String,
}

impl Guesses {
    fn new(t: &str) -> Self {
        // `$est` is the estimate `apply` was given.
        let clock = |est: &str| format!("{NOW} BETWEEN {est} - {MAX_LEAD_MS} AND {est} + {MAX_LAG_MS}");
        let then = |done: &str| {
            format!(
                "SELECT {done} AS done, {NOW} AS now, r.key_hash, r.generation, r.value, r.expires_at \
                 FROM (SELECT 1) AS one LEFT JOIN {t} AS r ON r.key_hash = $1"
            )
        };
        let counted = then("(SELECT count(*) FROM w)");
        Guesses {
            insert: format!(
                "WITH w AS (INSERT INTO {t} (key_hash, generation, value, expires_at) \
                 SELECT $1::bytea, $2::int8, $3::text, $4::int8 WHERE {} \
                 ON CONFLICT (key_hash) DO NOTHING RETURNING 1) {counted}",
                clock("$5::int8")
            ),
            replace: format!(
                "WITH w AS (UPDATE {t} SET generation = $2, value = $3, expires_at = $4 \
                 WHERE key_hash = $1 AND generation = $5 AND value = $6 AND expires_at = $7 AND {} \
                 RETURNING 1) {counted}",
                clock("$8::int8")
            ),
            delete: format!(
                "WITH w AS (DELETE FROM {t} \
                 WHERE key_hash = $1 AND generation = $2 AND value = $3 AND expires_at = $4 AND {} \
                 RETURNING 1) {counted}",
                clock("$5::int8")
            ),
            keep: then(&format!(
                "(CASE WHEN r.generation = $2 AND r.value = $3 AND r.expires_at = $4 AND {} THEN 1 ELSE 0 END)::int8",
                clock("$5::int8")
            )),
            keep_absent: then(&format!(
                "(CASE WHEN r.key_hash IS NULL AND {} THEN 1 ELSE 0 END)::int8",
                clock("$2::int8")
            )),
        }
    }
}

impl Postgres {
    pub(super) async fn open(
        url: &str,
        table: String,
        max_connections: u32,
        remember: usize,
    ) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::Setup { detail: format!("bad PostgreSQL URL: {e}"), source: Some(Box::new(e)) })?;
        // The server bounds its own work near the guard's 2 s deadline, so a
        // count stuck on a lock ends there instead of holding a connection.
        let options = options.options([
            ("lock_timeout", "1500"),
            ("statement_timeout", "1800"),
            ("idle_in_transaction_session_timeout", "10000"),
            ("plan_cache_mode", "force_generic_plan"),
        ]);
        // Not tested before use: see `conns.rs`.
        let pool = Conns::open(options, no_init, max_connections, Duration::from_millis(1_500))
            .await
            .map_err(|e| db_error("connect to PostgreSQL", e))?;
        let t = &table;
        Ok(Postgres {
            url_hint: crate::secret::redact(url),
            lock: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at) \
                 SELECT k, 0, 'null', 0 FROM unnest($1::bytea[]) AS k ORDER BY k \
                 ON CONFLICT (key_hash) DO UPDATE SET value = {t}.value \
                 RETURNING key_hash, generation, value, expires_at, {NOW} AS now"
            ),
            write: format!(
                "WITH w(k, v, e) AS (SELECT * FROM unnest($1::bytea[], $2::text[], $3::int8[])), \
                 up AS (UPDATE {t} SET generation = $4, value = w.v, expires_at = w.e FROM w \
                        WHERE {t}.key_hash = w.k RETURNING 1), \
                 del AS (DELETE FROM {t} WHERE key_hash = ANY($5::bytea[]) RETURNING 1) \
                 SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del)"
            ),
            read: format!(
                "SELECT {NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
                 FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash = ANY($1::bytea[])"
            ),
            sweep: format!(
                "DELETE FROM {t} WHERE key_hash IN \
                   (SELECT key_hash FROM {t} WHERE expires_at <= {NOW} LIMIT {BATCH} FOR UPDATE SKIP LOCKED) \
                 AND expires_at <= {NOW}"
            ),
            insert_new: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (key_hash) DO NOTHING"
            ),
            replace_if: format!(
                "UPDATE {t} SET generation = $1, value = $2, expires_at = $3 \
                 WHERE key_hash = $4 AND generation = $5 AND value = $6 AND expires_at = $7"
            ),
            delete_if: format!(
                "DELETE FROM {t} WHERE key_hash = $1 AND generation = $2 AND value = $3 AND expires_at = $4"
            ),
            guess: Guesses::new(t),
            replacer: Replacer::new(pool.clone(), t),
            pool,
            seen: Seen::new(remember),
            clock: ServerClock::new(),
            table,
        })
    }

    pub(super) async fn check_table(&self) -> Result<(), StoreError> {
        let look = async {
            let mut conn = self.pool.acquire().await?;
            let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
                .bind(&self.table)
                .fetch_one(&mut *conn)
                .await?;
            conn.release();
            Ok(exists)
        };
        let exists = look.await.map_err(|e| db_error("look for the table", e))?;
        if exists {
            Ok(())
        } else {
            Err(migrate::missing_table(&self.table, &self.url_hint))
        }
    }

    async fn try_update(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.to_vec()).collect();
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        let locked = sqlx::query(&self.lock).bind(&keys).fetch_all(&mut *tx).await?;
        let now = latest_now(&locked)?;
        let rows = match_rows(&locked, hashes)?;
        // Every row exists now (created if missing), locked by this transaction.
        let writes = decide(&rows, now).map_err(Failure::Store)?;
        let after: Vec<_> = rows.iter().zip(&writes).map(|(row, write)| row_after(row, write, generation)).collect();
        let (mut put_keys, mut values, mut expiries, mut deletes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for (key, write) in keys.iter().zip(writes) {
            match write {
                RowWrite::Put { value, expires_at } => {
                    put_keys.push(key.clone());
                    values.push(value);
                    expiries.push(expires_at);
                }
                RowWrite::Delete => deletes.push(key.clone()),
                RowWrite::Keep => {}
            }
        }
        if !put_keys.is_empty() || !deletes.is_empty() {
            sqlx::query(&self.write)
                .bind(put_keys)
                .bind(values)
                .bind(expiries)
                .bind(generation)
                .bind(deletes)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        conn.release();
        for (hash, row) in hashes.iter().zip(after) {
            self.seen.set(hash, row);
        }
        Ok(())
    }

    optimistic!(sqlx::PgConnection);

    /// One statement from the remembered row and the estimated clock: see
    /// `seen.rs`. A replaced row, the common case, goes with the other
    /// guesses waiting at the same time when a few are out already (see
    /// [`Replacer`]).
    async fn guess(&self, hash: &KeyHash, generation: i64, decide: &mut Decide<'_>) -> Result<Guess, Failure> {
        let Some(est) = self.clock.estimate() else { return Ok(Guess::NotTried) };
        let seen = self.seen.get(hash);
        // A refusal here (full, corrupt, a bad answer) may be of the guess
        // only: the count reads the row and decides again.
        let Ok(writes) = decide(std::slice::from_ref(&seen), est) else { return Ok(Guess::NotTried) };
        let write = writes.into_iter().next().unwrap_or(RowWrite::Keep);
        let after = row_after(&seen, &write, generation);
        // A place among the guesses out alone, held until the statement answers.
        let mut alone = None;
        let g = &self.guess;
        let query = match (seen, write) {
            (Some(old), RowWrite::Put { value, expires_at }) => {
                alone = self.replacer.alone();
                if alone.is_none() {
                    let guess = Replace { hash: *hash, generation, value, expires_at, old, est };
                    return self.guess_with_others(guess, after).await;
                }
                sqlx::query(&g.replace)
                    .bind(&hash[..])
                    .bind(generation)
                    .bind(value)
                    .bind(expires_at)
                    .bind(old.generation)
                    .bind(old.value)
                    .bind(old.expires_at)
                    .bind(est)
            }
            (None, RowWrite::Put { value, expires_at }) => {
                sqlx::query(&g.insert).bind(&hash[..]).bind(generation).bind(value).bind(expires_at).bind(est)
            }
            (Some(old), RowWrite::Delete) => sqlx::query(&g.delete)
                .bind(&hash[..])
                .bind(old.generation)
                .bind(old.value)
                .bind(old.expires_at)
                .bind(est),
            (Some(old), RowWrite::Keep) => {
                sqlx::query(&g.keep).bind(&hash[..]).bind(old.generation).bind(old.value).bind(old.expires_at).bind(est)
            }
            (None, RowWrite::Keep | RowWrite::Delete) => sqlx::query(&g.keep_absent).bind(&hash[..]).bind(est),
        };
        let mut conn = self.pool.acquire().await?;
        let found = query.fetch_all(&mut *conn).await?;
        conn.release();
        drop(alone);
        let now = latest_now(&found)?;
        let done: i64 = match found.first() {
            Some(row) => row.try_get("done")?,
            None => 0,
        };
        let replaced = if done == 1 {
            Replaced::Done { now }
        } else {
            let row = match_rows(&found, std::slice::from_ref(hash))?.into_iter().next().flatten();
            Replaced::Missed { row, now }
        };
        Ok(self.answered(hash, after, replaced))
    }

    /// A replace guess sent in one statement with the others waiting.
    async fn guess_with_others(&self, guess: Replace, after: Option<Stored>) -> Result<Guess, Failure> {
        let hash = guess.hash;
        match self.replacer.replace(guess).await {
            Ok(replaced) => Ok(self.answered(&hash, after, replaced)),
            Err(why) => Err(Failure::Store(StoreError::unavailable(Unavailable::StoreFailed, why))),
        }
    }

    /// What a guess's statement answered, alone or with others: its clock
    /// reading is taken, and a written row (`after`) is remembered.
    fn answered(&self, hash: &KeyHash, after: Option<Stored>, replaced: Replaced) -> Guess {
        match replaced {
            Replaced::Done { now } => {
                self.clock.reading(now);
                self.seen.set(hash, after);
                Guess::Done
            }
            Replaced::Missed { row, now } => {
                self.clock.reading(now);
                Guess::Missed { row, now }
            }
            Replaced::NotSent => Guess::NotTried,
        }
    }

    fn remember(&self, hash: &KeyHash, row: Option<Stored>) {
        self.seen.set(hash, row);
    }

    pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
        let read = async {
            let mut conn = self.pool.acquire().await?;
            let read = self.read_rows(&mut conn, hashes).await?;
            conn.release();
            Ok(read)
        };
        read.await.map_err(|e| db_error("read", e))
    }

    /// The rows of `hashes` in key order and the database's clock, in one statement.
    async fn read_rows(
        &self,
        conn: &mut sqlx::PgConnection,
        hashes: &[KeyHash],
    ) -> Result<(Vec<Option<Stored>>, Millis), sqlx::Error> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.to_vec()).collect();
        let found = sqlx::query(&self.read).bind(keys).fetch_all(&mut *conn).await?;
        let (rows, now) = (match_rows(&found, hashes)?, latest_now(&found)?);
        self.clock.reading(now);
        Ok((rows, now))
    }

    pub(super) fn batched(&self) -> u64 {
        self.replacer.batched()
    }

    fn sweep_sql(&self) -> String {
        self.sweep.clone()
    }

    chores!(
        migrations: POSTGRES,
        param: "$1",
        version_type: "BIGINT",
        record: "INSERT INTO {table}_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING"
    );
}

impl Attempts for Postgres {
    async fn locked(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        self.try_update(hashes, generation, decide).await
    }

    async fn optimistic(
        &self,
        hash: &KeyHash,
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Option<Result<Tried, Failure>> {
        Some(self.try_optimistic(hash, generation, decide).await)
    }
}

/// The test server's URL, or `None` after saying the test is skipped.
#[cfg(test)]
fn test_server() -> Option<String> {
    let url = std::env::var("LIMIT_STORE_TEST_POSTGRES").ok();
    if url.is_none() {
        eprintln!("LIMIT_STORE_TEST_POSTGRES is not set: skipping this database test (.ci/run sets it)");
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One count of `n + 1` on `hash` by the optimistic path; the clock each
    /// run of `decide` was given goes to `nows`.
    async fn count(pg: &Postgres, hash: &KeyHash, nows: &mut Vec<Millis>) -> Tried {
        let mut decide = |rows: &[Option<Stored>], now: Millis| {
            nows.push(now);
            let n: u64 = rows[0].as_ref().map_or(0, |r| r.value.parse().unwrap());
            Ok(vec![RowWrite::Put { value: (n + 1).to_string(), expires_at: now + 60_000 }])
        };
        match pg.try_optimistic(hash, 1, &mut decide).await {
            Ok(tried) => tried,
            Err(_) => panic!("the count failed"),
        }
    }

    /// A guess made on a clock estimate outside [estimate - 2 ms, estimate +
    /// 50 ms] of the database's clock writes nothing: the count reads the
    /// row and the clock and goes on from those, so `apply` is never left
    /// with a clock the database disagrees with.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guess_on_a_wrong_clock_estimate_writes_nothing() {
        let Some(url) = test_server() else { return };
        let table = format!("ls_guess_clock_{}", std::process::id());
        crate::DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let pg = Postgres::open(&url, table.clone(), 2, 100).await.unwrap();
        let hash = [7u8; 32];
        let mut nows = Vec::new();
        assert_eq!(count(&pg, &hash, &mut nows).await, Tried::ReadThenWrite, "no clock reading yet");
        assert_eq!(count(&pg, &hash, &mut nows).await, Tried::OneStatement, "a remembered row, a fresh estimate");
        pg.clock.shift(-10_000);
        assert_eq!(count(&pg, &hash, &mut nows).await, Tried::ReadThenWrite, "an estimate 10 s behind");
        pg.clock.shift(10_000);
        assert_eq!(count(&pg, &hash, &mut nows).await, Tried::ReadThenWrite, "an estimate 10 s ahead");
        assert_eq!(count(&pg, &hash, &mut nows).await, Tried::OneStatement, "the estimate follows the database");
        let row: (String, i64) = sqlx::query_as(&format!("SELECT value, {NOW} FROM {table}"))
            .fetch_one(&mut *pg.pool.acquire().await.unwrap())
            .await
            .unwrap();
        assert_eq!(row.0, "5", "every count landed once");
        assert!((row.1 - nows[nows.len() - 1]).abs() < 5_000, "apply's clock was the database's: {nows:?}");
        for t in [table.clone(), format!("{table}_migrations")] {
            sqlx::query(&format!("DROP TABLE {t}")).execute(&mut *pg.pool.acquire().await.unwrap()).await.unwrap();
        }
    }
}
