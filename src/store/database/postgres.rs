//! PostgreSQL: the rows of an update are locked by one `INSERT … ON CONFLICT
//! DO UPDATE … RETURNING` that creates a missing row locked, so a key's first
//! update is serialized like any other; the same statement reads the rows and
//! `clock_timestamp()`. The writes go in one statement, then `COMMIT`.
//!
//! A one-key count first tries one statement from the row this store
//! remembers, or none for a key it has not seen, and its estimate of the
//! database's clock (`optimistic.rs`): a writing `WITH` that writes only if both
//! hold, and reads the row and the clock as they were before it. On a miss,
//! that read is the first half of the optimistic path (a write only if the
//! row is still as read); if the row changed again, the locked transaction
//! settles it. Under load, these statements go several to one ([`Replacer`]).
//!
//! The store's sessions plan their statements once (`plan_cache_mode =
//! force_generic_plan`, PostgreSQL 12 or later): the batch statement's custom
//! plans cost more to make than to run.

mod optimistic;
mod pages;
mod reader;
mod replace;

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;

use super::attempt::{attempts, write_if, Attempts, Tried};
use super::conns::{no_init, Conns};
use super::error::{db_error, Failure};
use super::migrate::{self, POSTGRES};
use super::row::{decide_one, row_after, Conditional, Decide, KeyHash, RowWrite, Stored};
use super::upkeep::{latest_now, match_rows, read, upkeep};
use crate::last_seen::LastSeen;
use crate::server_clock::ServerClock;
use crate::{Millis, StoreError};

use self::optimistic::GuessStatements;
use self::pages::Pages;
use self::reader::Reader;
use self::replace::Replacer;
use super::read_first::ReadFirst;

const NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::int8";

#[derive(Debug)]
pub(super) struct Postgres {
    pool: Conns<PgConnection>,
    table: String,
    url_hint: String,
    lock: String,
    write: String,
    read: String,
    pages: Pages,
    insert_new: String,
    replace_if: String,
    delete_if: String,
    guess_statements: GuessStatements,
    replacer: Arc<Replacer>,
    reader: Arc<Reader>,
    read_first: ReadFirst,
    last_seen: LastSeen<Stored>,
    clock: ServerClock,
}

/// The URL parameters sqlx reads for PostgreSQL (and `options[NAME]`). It
/// logs any other at warn level with its value, which may be a password
/// (libpq's `sslpassword`, a misspelt `pasword`), so the store refuses one
/// by its key alone before sqlx sees it.
const PARAMETERS: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The first key of `url`'s query that sqlx would not read.
fn unknown_parameter(url: &str) -> Option<&str> {
    let query = url.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(query, _)| query);
    let keys = query.split('&').filter(|p| !p.is_empty()).map(|p| p.split_once('=').map_or(p, |(key, _)| key));
    keys.into_iter().find(|key| !(PARAMETERS.contains(key) || key.starts_with("options[") && key.ends_with(']')))
}

impl Postgres {
    pub(super) async fn open(
        url: &str,
        table: String,
        max_connections: u32,
        remember: usize,
        durable: bool,
    ) -> Result<Self, StoreError> {
        if let Some(key) = unknown_parameter(url) {
            return Err(StoreError::setup(format!(
                "the PostgreSQL URL's parameter `{key}` is not one the store reads: remove it (it reads {})",
                PARAMETERS.join(", ")
            )));
        }
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
        // Unless asked to wait for the disk, a count's commit does not: see
        // `DatabaseStoreBuilder::durable_commits`.
        let options = if durable { options } else { options.options([("synchronous_commit", "off")]) };
        let vacuum_options = options.clone();
        // Not tested before use: see `conns.rs`.
        let pool = Conns::open(options, no_init, max_connections, Duration::from_millis(1_500))
            .await
            .map_err(|e| db_error("connect to PostgreSQL", e))?;
        let t = &table;
        let read = format!(
            "SELECT {NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
             FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash = ANY($1::bytea[])"
        );
        Ok(Postgres {
            url_hint: crate::secret::redact(url),
            lock: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at) \
                 SELECT k, 0, 'null', 0 FROM unnest($1::bytea[]) AS k ORDER BY k \
                 ON CONFLICT (key_hash) DO UPDATE SET value = {t}.value \
                 RETURNING key_hash, generation, value, expires_at, {NOW} AS now"
            ),
            write: format!(
                "WITH w(k, v, e, f) AS (SELECT * FROM unnest($1::bytea[], $2::text[], $3::int8[], $6::int2[])), \
                 up AS (UPDATE {t} SET generation = $4, value = w.v, expires_at = w.e, family = w.f FROM w \
                        WHERE {t}.key_hash = w.k RETURNING 1), \
                 del AS (DELETE FROM {t} WHERE key_hash = ANY($5::bytea[]) RETURNING 1) \
                 SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del)"
            ),
            read: read.clone(),
            pages: Pages::new(t, vacuum_options),
            insert_new: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at, family) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (key_hash) DO NOTHING"
            ),
            replace_if: format!(
                "UPDATE {t} SET generation = $1, value = $2, expires_at = $3, family = $4 \
                 WHERE key_hash = $5 AND generation = $6 AND value = $7 AND expires_at = $8"
            ),
            delete_if: format!(
                "DELETE FROM {t} WHERE key_hash = $1 AND generation = $2 AND value = $3 AND expires_at = $4"
            ),
            guess_statements: GuessStatements::new(t),
            replacer: Replacer::new(pool.clone(), t),
            reader: Reader::new(pool.clone(), read),
            read_first: ReadFirst::default(),
            pool,
            last_seen: LastSeen::new(remember),
            clock: ServerClock::new(),
            table,
        })
    }

    pub(super) async fn check_table(&self) -> Result<(), StoreError> {
        let look = async {
            let mut conn = self.pool.acquire().await?;
            // The clock too: the first counts after connecting can guess.
            let (exists, now): (bool, Millis) = sqlx::query_as(&format!("SELECT to_regclass($1) IS NOT NULL, {NOW}"))
                .bind(&self.table)
                .fetch_one(&mut *conn)
                .await?;
            conn.release();
            self.clock.reading(now);
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
        let mut families = Vec::new();
        for (key, write) in keys.iter().zip(writes) {
            match write {
                RowWrite::Put { value, expires_at, family } => {
                    put_keys.push(key.clone());
                    values.push(value);
                    expiries.push(expires_at);
                    families.push(family);
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
                .bind(families)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        conn.release();
        for (hash, row) in hashes.iter().zip(after) {
            self.last_seen.set(hash, row);
        }
        Ok(())
    }

    write_if!(sqlx::PgConnection, sqlx::Postgres);

    fn remember(&self, hash: &KeyHash, row: Option<Stored>) {
        self.last_seen.set(hash, row);
    }

    read!();

    /// The rows of `hashes` in key order and the database's clock, in one statement.
    async fn read_rows(
        &self,
        conn: &mut sqlx::PgConnection,
        hashes: &[KeyHash],
    ) -> Result<(Vec<Option<Stored>>, Millis), sqlx::Error> {
        let (rows, now) = select_rows(conn, &self.read, hashes).await?;
        self.clock.reading(now);
        Ok((rows, now))
    }

    pub(super) fn batched(&self) -> u64 {
        self.replacer.batched()
    }

    pub(super) fn read_together(&self) -> u64 {
        self.reader.together()
    }

    upkeep!(
        migrations: POSTGRES,
        param: "$1",
        version_type: "BIGINT",
        record: "INSERT INTO {table}_migrations (version) VALUES ($1) ON CONFLICT DO NOTHING"
    );
}

attempts!(Postgres);

/// The rows of `hashes` in key order and the database's clock, by the store's
/// read `sql` (`$1`: the keys), in one statement; for the store's own reads
/// and the shared ones (`reader.rs`).
async fn select_rows(
    conn: &mut PgConnection,
    sql: &str,
    hashes: &[KeyHash],
) -> Result<(Vec<Option<Stored>>, Millis), sqlx::Error> {
    let keys: Vec<Vec<u8>> = hashes.iter().map(|h| h.to_vec()).collect();
    let found = sqlx::query(sql).bind(keys).fetch_all(&mut *conn).await?;
    Ok((match_rows(&found, hashes)?, latest_now(&found)?))
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

    /// A parameter sqlx would log with its value is refused by its key.
    #[test]
    fn parameters_sqlx_does_not_read_are_named_by_key() {
        let unknown = |url| unknown_parameter(url);
        assert_eq!(unknown("postgres://u:p@h/db"), None);
        assert_eq!(unknown("postgres://h/db?sslmode=require&options[search_path]=a&application_name=x#f"), None);
        assert_eq!(unknown("postgres://h/db?sslmode=require&sslpassword=hunter2"), Some("sslpassword"));
        assert_eq!(unknown("postgres://h/db?pasword"), Some("pasword"));
    }

    /// The store's sessions commit without waiting for the disk unless asked
    /// to; asked, they keep the server's own setting.
    #[tokio::test]
    async fn commits_wait_for_the_disk_only_when_asked() {
        let Some(url) = test_server() else { return };
        let setting = |pg: Postgres| async move {
            let mut conn = pg.pool.acquire().await.unwrap();
            sqlx::query_scalar::<_, String>("SHOW synchronous_commit").fetch_one(&mut *conn).await.unwrap()
        };
        let server = setting(Postgres::open(&url, "limit_store".into(), 1, 0, true).await.unwrap()).await;
        let own: PgConnectOptions = url.parse().unwrap();
        let mut plain = sqlx::PgConnection::connect_with(&own).await.unwrap();
        let default: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut plain).await.unwrap();
        assert_eq!(server, default, "durable: the server's own setting");
        let fast = setting(Postgres::open(&url, "limit_store".into(), 1, 0, false).await.unwrap()).await;
        assert_eq!(fast, "off");
    }
}
