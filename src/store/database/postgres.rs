//! PostgreSQL: the rows of an update are locked by one `INSERT … ON CONFLICT
//! DO UPDATE … RETURNING` that creates a missing row locked, so a key's first
//! update is serialized like any other; the same statement reads the rows and
//! `clock_timestamp()`. The writes go in one statement, then `COMMIT`.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use super::attempt::Attempts;
use super::chores::{chores, latest_now, match_rows, optimistic};
use super::error::{db_error, Failure};
use super::migrate::{self, POSTGRES};
use super::row::{Conditional, Decide, KeyHash, RowWrite, Stored};
use super::sweep::BATCH;
use crate::{Millis, StoreError};

const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::int8";

#[derive(Debug)]
pub(super) struct Postgres {
    pool: PgPool,
    table: String,
    url_hint: String,
    lock: String,
    write: String,
    read: String,
    sweep: String,
    insert_new: String,
    replace_if: String,
    delete_if: String,
}

impl Postgres {
    pub(super) async fn open(url: &str, table: String, max_connections: u32) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url
            .parse()
            .map_err(|e| StoreError::Setup { detail: format!("bad PostgreSQL URL: {e}"), source: Some(Box::new(e)) })?;
        // The server bounds its own work near the guard's 2 s deadline, so a
        // count stuck on a lock ends there instead of holding a connection.
        let options = options.options([
            ("lock_timeout", "1500"),
            ("statement_timeout", "1800"),
            ("idle_in_transaction_session_timeout", "10000"),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_millis(1_500))
            // No ping before every acquire: it doubled a count's round trips. A
            // connection that died is found by the call that uses it, which is
            // answered unavailable, and sqlx drops the connection.
            .test_before_acquire(false)
            .connect_with(options)
            .await
            .map_err(|e| db_error("connect to PostgreSQL", e))?;
        let t = &table;
        Ok(Postgres {
            pool,
            url_hint: super::redact(url),
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
            table,
        })
    }

    pub(super) async fn check_table(&self) -> Result<(), StoreError> {
        let exists: bool = sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(&self.table)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| db_error("look for the table", e))?;
        if exists {
            Ok(())
        } else {
            Err(migrate::missing_table(&self.table, &self.url_hint))
        }
    }

    async fn try_update(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.to_vec()).collect();
        let mut tx = self.pool.begin().await?;
        let locked = sqlx::query(&self.lock).bind(&keys).fetch_all(&mut *tx).await?;
        let now = latest_now(&locked)?;
        let rows = match_rows(&locked, hashes)?;
        // Every row exists now (created if missing), locked by this transaction.
        let writes = decide(&rows, now).map_err(Failure::Store)?;
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
        Ok(())
    }

    optimistic!();

    pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
        let read = async {
            let mut conn = self.pool.acquire().await?;
            self.read_rows(&mut conn, hashes).await
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
        Ok((match_rows(&found, hashes)?, latest_now(&found)?))
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
    ) -> Option<Result<bool, Failure>> {
        Some(self.try_optimistic(hash, generation, decide).await)
    }
}
