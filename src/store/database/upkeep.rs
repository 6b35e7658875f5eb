//! The upkeep every backend does the same way, in its own SQL dialect:
//! migrating, sweeping in batches, counting live rows, and putting the rows a
//! query found into key order. The statements are here once; PostgreSQL and
//! MySQL run them on sqlx (the macros below), SQLite on rusqlite
//! (`sqlite/upkeep.rs`).

#[cfg(any(feature = "postgres", feature = "mysql"))]
use sqlx::{ColumnIndex, Decode, Row, Type};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::row::{KeyHash, Stored};

/// The table that records which migrations ran on `table`.
pub(super) fn migrations_log(table: &str, version_type: &str) -> String {
    format!("CREATE TABLE IF NOT EXISTS {table}_migrations (version {version_type} PRIMARY KEY)")
}

/// Finds migration `p` in `table`'s record of migrations.
pub(super) fn applied(table: &str, p: &str) -> String {
    format!("SELECT version FROM {table}_migrations WHERE version = {p}")
}

/// Fails on a table without the `family` column; reads no row.
pub(super) fn family_column(table: &str) -> String {
    format!("SELECT family FROM {table} WHERE 1 = 0")
}

/// Generation `p`'s live rows per family, on the clock `now`.
pub(super) fn count_families(table: &str, now: &str, p: &str) -> String {
    format!("SELECT family, count(*) FROM {table} WHERE generation = {p} AND expires_at > {now} GROUP BY family")
}

/// Generation `p`'s live rows, on the clock `now`.
pub(super) fn count_live(table: &str, now: &str, p: &str) -> String {
    format!("SELECT count(*) FROM {table} WHERE generation = {p} AND expires_at > {now}")
}

/// Live rows of every generation that expire within `p` ms of `now`.
pub(super) fn count_expiring(table: &str, now: &str, p: &str) -> String {
    format!("SELECT count(*) FROM {table} WHERE expires_at > {now} AND expires_at <= {now} + {p}")
}

/// Live rows per generation (0 is no generation).
pub(super) fn generations(table: &str, now: &str) -> String {
    format!("SELECT generation, count(*) FROM {table} WHERE expires_at > {now} AND generation <> 0 GROUP BY generation")
}

/// Runs one statement of a migration on `$conn`: a change that is there
/// already is no error, and one that raced another process's same change
/// (PostgreSQL's catalogs answer a unique violation) runs once more, and then
/// finds it there.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! migration_statement {
    ($conn:expr, $sql:expr) => {{
        let mut raced = false;
        loop {
            match sqlx::query($sql).execute(&mut *$conn).await {
                Ok(_) => break Ok(()),
                Err(e) if super::error::there_already(&e) => break Ok(()),
                Err(e) if !raced && super::error::raced(&e) => raced = true,
                Err(e) => break Err(e),
            }
        }
    }};
}
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) use migration_statement;

/// Generates `migrate`, `check_family_column`, `count_live`,
/// `count_families`, `count_expiring` and `generations` inside a server
/// backend's `impl`. The backend has `pool` (`conns::Conns`), `table` and
/// `url_hint` fields and a `NOW` constant (its clock in ms) in scope.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! upkeep {
    (migrations: $migrations:expr, param: $p:literal, version_type: $ty:literal, record: $record:literal) => {
        pub(super) async fn migrate(&self, table: &str) -> Result<(), StoreError> {
            let failed = |e| db_error("migrate", e);
            let mut conn = self.pool.acquire().await.map_err(failed)?;
            let log = super::upkeep::migrations_log(table, $ty);
            super::upkeep::migration_statement!(conn, &log).map_err(failed)?;
            let applied = super::upkeep::applied(table, $p);
            for migration in $migrations {
                let done: Option<i64> = sqlx::query_scalar(&applied)
                    .bind(migration.version)
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(failed)?;
                if done.is_some() {
                    continue;
                }
                for statement in migrate::statements(migration, table) {
                    super::upkeep::migration_statement!(conn, &statement).map_err(failed)?;
                }
                sqlx::query(&format!($record, table = table))
                    .bind(migration.version)
                    .execute(&mut *conn)
                    .await
                    .map_err(failed)?;
            }
            conn.release();
            Ok(())
        }

        /// Refuses a table whose migrations stop before the `family` column
        /// (a store of an older version made it): every insert writes it.
        pub(super) async fn check_family_column(&self) -> Result<(), StoreError> {
            let sql = super::upkeep::family_column(&self.table);
            let look = async {
                let mut conn = self.pool.acquire().await?;
                let found = sqlx::query(&sql).fetch_all(&mut *conn).await;
                conn.release();
                Ok::<_, sqlx::Error>(found.is_ok())
            };
            if look.await.map_err(|e| db_error("look for the family column", e))? {
                Ok(())
            } else {
                Err(migrate::not_migrated(&self.table, &self.url_hint))
            }
        }

        /// This generation's live rows, in all and per family tag: for the
        /// bound and each family's share of it.
        pub(super) async fn count_families(&self, generation: i64) -> Result<super::Census, StoreError> {
            let sql = super::upkeep::count_families(&self.table, NOW, $p);
            let count = async {
                let mut conn = self.pool.acquire().await?;
                let groups: Vec<(Option<i16>, i64)> =
                    sqlx::query_as(&sql).bind(generation).fetch_all(&mut *conn).await?;
                conn.release();
                Ok(groups)
            };
            let groups = count.await.map_err(|e| db_error("count live entries", e))?;
            Ok(super::Census::of(groups))
        }

        pub(super) async fn count_live(&self, generation: i64) -> Result<u64, StoreError> {
            self.count_rows(super::upkeep::count_live(&self.table, NOW, $p), generation, "count live entries").await
        }

        /// Live rows of every generation that expire within `within_ms`:
        /// rows the next sweep will find, if it comes that much later.
        pub(super) async fn count_expiring(&self, within_ms: i64) -> Result<u64, StoreError> {
            let sql = super::upkeep::count_expiring(&self.table, NOW, $p);
            self.count_rows(sql, within_ms, "count expiring entries").await
        }

        /// The one count `sql` answers, given its one parameter.
        async fn count_rows(&self, sql: String, param: i64, what: &'static str) -> Result<u64, StoreError> {
            let count = async {
                let mut conn = self.pool.acquire().await?;
                let n: i64 = sqlx::query_scalar(&sql).bind(param).fetch_one(&mut *conn).await?;
                conn.release();
                Ok(n)
            };
            let n = count.await.map_err(|e| db_error(what, e))?;
            Ok(n.unsigned_abs())
        }

        pub(super) async fn generations(&self) -> Result<Vec<(i64, u64)>, StoreError> {
            let sql = super::upkeep::generations(&self.table, NOW);
            let count = async {
                let mut conn = self.pool.acquire().await?;
                let rows: Vec<(i64, i64)> = sqlx::query_as(&sql).fetch_all(&mut *conn).await?;
                conn.release();
                Ok(rows)
            };
            let rows = count.await.map_err(|e| db_error("count generations", e))?;
            Ok(rows.into_iter().map(|(g, n)| (g, n.unsigned_abs())).collect())
        }
    };
}
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) use upkeep;

/// Generates `sweep` inside MySQL's `impl`: its `sweep_sql()` (a delete
/// of at most [`BATCH`](super::sweep::BATCH) expired rows, by the index on
/// `expires_at`) again until a batch comes short. (PostgreSQL sweeps by
/// pages instead: `postgres/pages.rs`; SQLite the same way on rusqlite.)
#[cfg(feature = "mysql")]
macro_rules! sweep_in_batches {
    () => {
        pub(super) async fn sweep(&self) -> Result<u64, StoreError> {
            let sweep = self.sweep_sql();
            let mut removed = 0;
            loop {
                let batch = async {
                    let mut conn = self.pool.acquire().await?;
                    let done = sqlx::query(&sweep).execute(&mut *conn).await?;
                    conn.release();
                    Ok(done)
                };
                let done = batch.await.map_err(|e| db_error("sweep", e))?;
                removed += done.rows_affected();
                if done.rows_affected() < BATCH.unsigned_abs() {
                    return Ok(removed);
                }
            }
        }
    };
}
#[cfg(feature = "mysql")]
pub(super) use sweep_in_batches;

/// Generates `read` inside a backend's `impl`: the rows of `hashes` in key
/// order and the database's clock, by the backend's `read_rows(conn, hashes)`
/// on one of its `pool`'s connections.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! read {
    () => {
        /// A read that met a dead connection (a server restart) reads once
        /// more on a fresh one: a read applies nothing.
        pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
            let read = || async {
                let mut conn = self.pool.acquire().await?;
                let read = self.read_rows(&mut conn, hashes).await?;
                conn.release();
                Ok::<_, sqlx::Error>(read)
            };
            match read().await {
                Err(e) if super::error::is_dead_connection(&e) => {
                    self.pool.purge_idle();
                    read().await
                }
                done => done,
            }
            .map_err(|e| db_error("read", e))
        }
    };
}
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) use read;

/// Puts the rows found in key order; a key with no row (or a row of a LEFT
/// JOIN that found none) gets `None`. (SQLite reads its rows with rusqlite.)
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn match_rows<R>(found: &[R], hashes: &[KeyHash]) -> Result<Vec<Option<Stored>>, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> Vec<u8>: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut rows: Vec<Option<Stored>> = vec![None; hashes.len()];
    for row in found {
        let hash: Option<Vec<u8>> = row.try_get("key_hash")?;
        let Some(hash) = hash else { continue };
        if let Some(i) = hashes.iter().position(|h| h[..] == hash[..]) {
            rows[i] = Some(Stored {
                generation: row.try_get("generation")?,
                value: row.try_get("value")?,
                expires_at: row.try_get("expires_at")?,
            });
        }
    }
    Ok(rows)
}

/// The latest `now` column among the rows a query found (each row carries the
/// database's clock; the latest is the one after every lock was taken).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn latest_now<R>(found: &[R]) -> Result<i64, sqlx::Error>
where
    R: Row,
    for<'a> &'a str: ColumnIndex<R>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    let mut now = i64::MIN;
    for row in found {
        now = now.max(row.try_get("now")?);
    }
    Ok(now)
}

/// A statement for every number of keys a call may have (index = key count),
/// built once when the store opens instead of on every count.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(super) fn by_key_count(statement: impl Fn(usize) -> String) -> Vec<String> {
    (0..=crate::MAX_KEYS).map(statement).collect()
}

/// `?, ?, …` for `n` values.
#[cfg(any(feature = "sqlite", feature = "mysql"))]
pub(super) fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}
