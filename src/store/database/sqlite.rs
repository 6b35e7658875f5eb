//! SQLite: one writer at a time. Each update is a `BEGIN IMMEDIATE`
//! transaction, which takes the write lock before reading, so a key's first
//! update is serialized like any other; WAL mode lets readers go on meanwhile.
//! A long transaction elsewhere on the same file delays every count (the
//! busy timeout, 1.5 s, keeps the answer within the guard's deadline).

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use super::attempt::Attempts;
use super::chores::{by_key_count, chores, latest_now, marks, match_rows};
use super::error::{db_error, Failure};
use super::migrate::{self, SQLITE};
use super::row::{Decide, KeyHash, RowWrite, Stored};
use super::sweep::BATCH;
use crate::{Millis, StoreError};

/// SQLite's own clock, in ms since the epoch.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

#[derive(Debug)]
pub(super) struct Sqlite {
    pool: SqlitePool,
    table: String,
    url_hint: String,
    /// By key count: the clock and the rows of the keys, in one statement.
    select: Vec<String>,
    upsert: String,
    delete: String,
}

impl Sqlite {
    pub(super) async fn open(url: &str, table: String, max_connections: u32) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Setup { detail: format!("bad SQLite URL: {e}"), source: Some(Box::new(e)) })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_millis(1_500));
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_millis(1_500))
            .connect_with(options)
            .await
            .map_err(|e| db_error("open the SQLite database", e))?;
        let t = &table;
        Ok(Sqlite {
            pool,
            url_hint: super::redact(url),
            select: by_key_count(|n| {
                format!(
                    "SELECT {NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
                     FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN ({})",
                    marks(n)
                )
            }),
            upsert: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
                 ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
                 value = excluded.value, expires_at = excluded.expires_at"
            ),
            delete: format!("DELETE FROM {t} WHERE key_hash = ?"),
            table,
        })
    }

    pub(super) async fn check_table(&self) -> Result<(), StoreError> {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?")
            .bind(&self.table)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("look for the table", e))?;
        if n > 0 {
            Ok(())
        } else {
            Err(migrate::missing_table(&self.table, &self.url_hint))
        }
    }

    async fn try_update(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut query = sqlx::query(&self.select[hashes.len()]);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&mut *tx).await?;
        let rows = match_rows(&found, hashes)?;
        let writes = decide(&rows, latest_now(&found)?).map_err(Failure::Store)?;
        for (hash, write) in hashes.iter().zip(writes) {
            match write {
                RowWrite::Put { value, expires_at } => {
                    sqlx::query(&self.upsert)
                        .bind(&hash[..])
                        .bind(generation)
                        .bind(value)
                        .bind(expires_at)
                        .execute(&mut *tx)
                        .await?;
                }
                RowWrite::Delete => {
                    sqlx::query(&self.delete).bind(&hash[..]).execute(&mut *tx).await?;
                }
                RowWrite::Keep => {}
            }
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
        let mut query = sqlx::query(&self.select[hashes.len()]);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&self.pool).await.map_err(|e| db_error("read", e))?;
        let read = || Ok((match_rows(&found, hashes)?, latest_now(&found)?));
        read().map_err(|e| db_error("read", e))
    }

    fn sweep_sql(&self) -> String {
        let t = &self.table;
        format!(
            "DELETE FROM {t} WHERE key_hash IN (SELECT key_hash FROM {t} WHERE expires_at <= {NOW} LIMIT {BATCH}) \
             AND expires_at <= {NOW}"
        )
    }

    chores!(
        migrations: SQLITE,
        param: "?",
        version_type: "INTEGER",
        record: "INSERT OR IGNORE INTO {table}_migrations (version) VALUES (?)"
    );
}

impl Attempts for Sqlite {
    async fn locked(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        self.try_update(hashes, generation, decide).await
    }
}
