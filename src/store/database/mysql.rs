//! MySQL and MariaDB: the rows of an update are locked by one multi-row
//! `INSERT … ON DUPLICATE KEY UPDATE`, in key-hash order, which creates a
//! missing row locked (so a key's first update is serialized like any other)
//! and locks an existing one. Sessions run at READ COMMITTED, which keeps
//! InnoDB's gap locks out of the way; a deadlock that still happens is retried.
//!
//! A one-key count reads its row with the clock, then writes only if the
//! row is unchanged. On a row this store remembers (`crate::last_seen`) it writes
//! at once: `apply` runs on that row at the estimated clock, and the write
//! lands only if the row and the server's clock are as guessed. A key it has
//! not seen is guessed to have no row, and inserted in one statement if so,
//! while such keys tend to have none (`read_first.rs`). MySQL has no
//! `RETURNING` on `UPDATE`, so a guess that missed reads next, as a count
//! without one does; a count that writes nothing reads to confirm.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use smallvec::SmallVec;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{Connection, Executor};

use super::attempt::{attempts, optimistic, write_if, Attempts, Guess, Tried};
use super::conns::Conns;
use super::error::{db_error, Failure};
use super::migrate::{self, MYSQL};
use super::read_first::ReadFirst;
use super::row::{decide_one, row_after, Conditional, Decide, KeyHash, RowWrite, Stored};
use super::sweep::BATCH;
use super::upkeep::{by_key_count, latest_now, marks, match_rows, read, sweep_in_batches, upkeep};
use crate::last_seen::LastSeen;
use crate::server_clock::{ServerClock, MAX_LAG_MS, MAX_LEAD_MS};
use crate::{Millis, StoreError};

/// The server's clock, in ms since the epoch.
const NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

#[derive(Debug)]
pub(super) struct Mysql {
    pool: Conns<MySqlConnection>,
    table: String,
    url_hint: String,
    /// By key count: create-or-lock the rows, in key-hash order.
    lock: Vec<String>,
    /// By key count: the clock and the rows of the keys, in one statement.
    select: Vec<String>,
    /// By key count: delete the rows.
    delete: Vec<String>,
    update: String,
    insert_new: String,
    replace_if: String,
    delete_if: String,
    /// `replace_if`, on the guessed row, if the clock is as estimated.
    guess_replace: String,
    /// `delete_if`, on the guessed row, if the clock is as estimated.
    guess_delete: String,
    /// `insert_new` of a key not seen, if the clock is as estimated.
    guess_insert: String,
    last_seen: LastSeen<Stored>,
    read_first: ReadFirst,
    clock: ServerClock,
}

/// Every session's settings.
fn session(conn: &mut MySqlConnection) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + '_>> {
    Box::pin(async move {
        // A count waits at most 1 s for a row lock (the smallest InnoDB
        // allows), well within the guard's deadline. The clock is
        // `UNIX_TIMESTAMP(NOW(3))`: in a zone with daylight saving it is
        // ambiguous for an hour a year and would jump back, so the session is
        // on UTC whatever the URL or the server says.
        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
        conn.execute("SET SESSION innodb_lock_wait_timeout = 1, time_zone = '+00:00'").await?;
        Ok(())
    })
}

impl Mysql {
    pub(super) async fn open(
        url: &str,
        table: String,
        max_connections: u32,
        remember: usize,
    ) -> Result<Self, StoreError> {
        let options: MySqlConnectOptions = url
            .parse()
            .map_err(|e| StoreError::Setup { detail: format!("bad MySQL URL: {e}"), source: Some(Box::new(e)) })?;
        // Not tested before use: see `conns.rs`.
        let pool = Conns::open(options, session, max_connections, Duration::from_millis(1_500))
            .await
            .map_err(|e| db_error("connect to MySQL", e))?;
        let t = &table;
        // Binds the estimate `apply` was given twice.
        let clock = format!("{NOW} BETWEEN ? - {MAX_LEAD_MS} AND ? + {MAX_LAG_MS}");
        Ok(Mysql {
            pool,
            url_hint: crate::secret::redact(url),
            lock: by_key_count(|n| {
                format!(
                    "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES {} \
                     ON DUPLICATE KEY UPDATE value = value",
                    vec!["(?, 0, 'null', 0)"; n].join(", ")
                )
            }),
            // `value` compares as bytes (utf8mb4_bin), which sqlx would
            // decode as a blob: read it back as text.
            select: by_key_count(|n| {
                if n == 1 {
                    // The usual count: an aggregate always answers one row,
                    // with NULLs when the key has none, and its primary-key
                    // lookup is read while the statement is planned, so the
                    // server spends less on it than on the join below, which
                    // plans a derived table and a range (measured in d7cf850).
                    format!(
                        "SELECT {NOW} AS now, MAX(key_hash) AS key_hash, MAX(generation) AS generation, \
                         MAX(CAST(value AS CHAR)) AS value, MAX(expires_at) AS expires_at \
                         FROM {t} WHERE key_hash = ?"
                    )
                } else {
                    format!(
                        "SELECT {NOW} AS now, t.key_hash, t.generation, CAST(t.value AS CHAR) AS value, t.expires_at \
                         FROM (SELECT 1 AS one) AS d LEFT JOIN {t} AS t ON t.key_hash IN ({})",
                        marks(n)
                    )
                }
            }),
            delete: by_key_count(|n| format!("DELETE FROM {t} WHERE key_hash IN ({})", marks(n))),
            update: format!("UPDATE {t} SET generation = ?, value = ?, expires_at = ?, family = ? WHERE key_hash = ?"),
            insert_new: format!(
                "INSERT IGNORE INTO {t} (key_hash, generation, value, expires_at, family) VALUES (?, ?, ?, ?, ?)"
            ),
            replace_if: format!(
                "UPDATE {t} SET generation = ?, value = ?, expires_at = ?, family = ? \
                 WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ?"
            ),
            delete_if: format!(
                "DELETE FROM {t} WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ?"
            ),
            guess_replace: format!(
                "UPDATE {t} SET generation = ?, value = ?, expires_at = ?, family = ? \
                 WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ? AND {clock}"
            ),
            guess_delete: format!(
                "DELETE FROM {t} WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ? AND {clock}"
            ),
            guess_insert: format!(
                "INSERT IGNORE INTO {t} (key_hash, generation, value, expires_at, family) \
                 SELECT ?, ?, ?, ?, ? FROM DUAL WHERE {clock}"
            ),
            last_seen: LastSeen::new(remember),
            read_first: ReadFirst::default(),
            clock: ServerClock::new(),
            table,
        })
    }

    pub(super) async fn check_table(&self) -> Result<(), StoreError> {
        let look = async {
            let mut conn = self.pool.acquire().await?;
            // The clock too: the first counts after connecting can guess.
            let (n, now): (i64, Millis) = sqlx::query_as(&format!(
                "SELECT COUNT(*), {NOW} FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_name = ?"
            ))
            .bind(&self.table)
            .fetch_one(&mut *conn)
            .await?;
            conn.release();
            self.clock.reading(now);
            Ok(n)
        };
        let n = look.await.map_err(|e| db_error("look for the table", e))?;
        if n > 0 {
            Ok(())
        } else {
            Err(migrate::missing_table(&self.table, &self.url_hint))
        }
    }

    optimistic!(sqlx::MySqlConnection);
    write_if!(sqlx::MySqlConnection, sqlx::MySql);

    /// One statement from the row this store remembers for `hash` (or no
    /// row, for a key it has not seen, while such keys tend to have none), at
    /// the estimated clock: written only if the row and the clock are as
    /// guessed. Not tried without an estimate, nor for a count that writes
    /// nothing (a read confirms it in as many trips). A miss wrote nothing
    /// and read nothing (MySQL has no `RETURNING` on `UPDATE`): the count
    /// reads next, here for a key not seen (noting whether it had a row, see
    /// `read_first.rs`), else in `try_optimistic`.
    async fn guess(&self, hash: &KeyHash, generation: i64, decide: &mut Decide<'_>) -> Result<Guess, sqlx::Error> {
        let Some(est) = self.clock.estimate() else { return Ok(Guess::NotTried) };
        let seen = self.last_seen.get(hash);
        let new = seen.is_none();
        let mut query = None;
        let mut after = None;
        if !(new && self.read_first.pays()) {
            // A refusal here may be of the guess only: the count reads and decides again.
            if let Ok(write) = decide_one(decide, &seen, est) {
                after = row_after(&seen, &write, generation);
                let statements = [&*self.guess_insert, &*self.guess_replace, &*self.guess_delete];
                query = Self::conditional_query(statements, hash, generation, Conditional::new(seen, write));
            }
        }
        if query.is_none() && !new {
            return Ok(Guess::NotTried);
        }
        let mut conn = self.pool.acquire().await?;
        let guessed = match query {
            Some(query) => query.bind(est).bind(est).execute(&mut *conn).await?.rows_affected() == 1,
            None => false,
        };
        let answer = if guessed {
            if new {
                self.read_first.note_row(false);
            }
            self.last_seen.set(hash, after);
            Guess::Done
        } else if new {
            let (rows, now) = self.read_rows(&mut conn, std::slice::from_ref(hash)).await?;
            let row = rows.into_iter().next().flatten();
            self.read_first.note_row(row.is_some());
            Guess::Missed { row, now }
        } else {
            self.last_seen.set(hash, None);
            Guess::NotTried
        };
        conn.release();
        Ok(answer)
    }

    fn remember(&self, hash: &KeyHash, row: Option<Stored>) {
        self.last_seen.set(hash, row);
    }

    async fn try_update(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        let mut sorted: SmallVec<[&KeyHash; 4]> = hashes.iter().collect();
        sorted.sort_unstable();
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        let mut query = sqlx::query(&self.lock[hashes.len()]);
        for hash in &sorted {
            query = query.bind(&hash[..]);
        }
        query.execute(&mut *tx).await?;
        let mut query = sqlx::query(&self.select[hashes.len()]);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&mut *tx).await?;
        let rows = match_rows(&found, hashes)?;
        let now = latest_now(&found)?;
        self.clock.reading(now);
        let writes = decide(&rows, now).map_err(Failure::Store)?;
        let after: SmallVec<[Option<Stored>; 4]> =
            rows.iter().zip(&writes).map(|(row, write)| row_after(row, write, generation)).collect();
        let mut deletes: SmallVec<[&KeyHash; 4]> = SmallVec::new();
        for (hash, write) in hashes.iter().zip(writes) {
            match write {
                RowWrite::Put { value, expires_at, family } => {
                    sqlx::query(&self.update)
                        .bind(generation)
                        .bind(value)
                        .bind(expires_at)
                        .bind(family)
                        .bind(&hash[..])
                        .execute(&mut *tx)
                        .await?;
                }
                RowWrite::Delete => deletes.push(hash),
                RowWrite::Keep => {}
            }
        }
        if !deletes.is_empty() {
            let mut query = sqlx::query(&self.delete[deletes.len()]);
            for hash in deletes {
                query = query.bind(&hash[..]);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        conn.release();
        for (hash, row) in hashes.iter().zip(after) {
            self.last_seen.set(hash, row);
        }
        Ok(())
    }

    read!();

    /// The rows of `hashes` in key order and the database's clock, in one statement.
    async fn read_rows(
        &self,
        conn: &mut sqlx::MySqlConnection,
        hashes: &[KeyHash],
    ) -> Result<(Vec<Option<Stored>>, Millis), sqlx::Error> {
        let mut query = sqlx::query(&self.select[hashes.len()]);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&mut *conn).await?;
        let now = latest_now(&found)?;
        self.clock.reading(now);
        Ok((match_rows(&found, hashes)?, now))
    }

    /// MySQL sends every count on its own.
    pub(super) fn batched(&self) -> u64 {
        0
    }

    /// MySQL reads each count's row on its own.
    pub(super) fn read_together(&self) -> u64 {
        0
    }

    fn sweep_sql(&self) -> String {
        format!("DELETE FROM {} WHERE expires_at <= {NOW} LIMIT {BATCH}", self.table)
    }

    upkeep!(
        migrations: MYSQL,
        param: "?",
        version_type: "BIGINT",
        record: "INSERT IGNORE INTO {table}_migrations (version) VALUES (?)"
    );

    sweep_in_batches!();
}

attempts!(Mysql);

#[cfg(test)]
mod tests;
