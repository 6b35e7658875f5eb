//! SQLite: one writer at a time. Each update is a `BEGIN IMMEDIATE`
//! transaction, which takes the write lock before reading, so a key's first
//! update is serialized like any other; WAL mode lets readers go on meanwhile.
//! A long transaction elsewhere on the same file delays every count (the
//! busy timeout, 1.5 s, keeps the answer within the guard's deadline).

use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use super::chores::{chores, match_rows};
use super::error::{db_error, settle, Failure};
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
}

/// `?, ?, …` for `n` values.
fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
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
        Ok(Sqlite { pool, table, url_hint: super::redact(url) })
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

    pub(super) async fn update(
        &self,
        hashes: &[KeyHash],
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Result<(), StoreError> {
        let mut retries = 0;
        loop {
            if let Some(done) = settle(self.try_update(hashes, generation, decide).await, &mut retries) {
                return done;
            }
        }
    }

    async fn try_update(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        let t = &self.table;
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let now: Millis = sqlx::query_scalar(&format!("SELECT {NOW}")).fetch_one(&mut *tx).await?;
        let select = format!(
            "SELECT key_hash, generation, value, expires_at FROM {t} WHERE key_hash IN ({})",
            marks(hashes.len())
        );
        let mut query = sqlx::query(&select);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&mut *tx).await?;
        let rows = match_rows(&found, hashes)?;
        let writes = decide(&rows, now).map_err(Failure::Store)?;
        let upsert = format!(
            "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
             value = excluded.value, expires_at = excluded.expires_at"
        );
        let delete = format!("DELETE FROM {t} WHERE key_hash = ?");
        for (hash, write) in hashes.iter().zip(writes) {
            match write {
                RowWrite::Put { value, expires_at } => {
                    sqlx::query(&upsert)
                        .bind(&hash[..])
                        .bind(generation)
                        .bind(value)
                        .bind(expires_at)
                        .execute(&mut *tx)
                        .await?;
                }
                RowWrite::Delete => {
                    sqlx::query(&delete).bind(&hash[..]).execute(&mut *tx).await?;
                }
                RowWrite::Keep => {}
            }
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
        let t = &self.table;
        let mut conn = self.pool.acquire().await.map_err(|e| db_error("read", e))?;
        let now: Millis = sqlx::query_scalar(&format!("SELECT {NOW}"))
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| db_error("read", e))?;
        let select = format!(
            "SELECT key_hash, generation, value, expires_at FROM {t} WHERE key_hash IN ({})",
            marks(hashes.len())
        );
        let mut query = sqlx::query(&select);
        for hash in hashes {
            query = query.bind(&hash[..]);
        }
        let found = query.fetch_all(&mut *conn).await.map_err(|e| db_error("read", e))?;
        Ok((match_rows(&found, hashes).map_err(|e| db_error("read", e))?, now))
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
