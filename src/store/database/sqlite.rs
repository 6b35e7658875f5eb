//! SQLite: one writer at a time. Each update is a `BEGIN IMMEDIATE`
//! transaction, which takes the write lock before reading, so a key's first
//! update is serialized like any other; WAL mode lets readers go on meanwhile.
//! A long transaction elsewhere on the same file delays every count (the
//! busy timeout, 1.5 s, keeps the answer within the guard's deadline).
//!
//! Counts run on rusqlite, through the store's [`writer`]: the whole
//! transaction — begin, the select of the rows and the clock, `decide`, the
//! writes, commit — runs on a blocking thread with cached statements, and
//! counts that arrive meanwhile wait and go in the next transaction
//! together. `decide` borrows the caller's `apply`, so the writer never
//! holds it: it sends the rows to the caller, whose own task decides and
//! answers ([`ask`]); a caller that stopped waiting answers nothing, and its
//! count writes nothing. A count through `update_owned` (as `Limits` counts)
//! owns its `decide`, and the writer runs it itself (`owned.rs`). Reads run
//! on a few connections of their own ([`pool`]).
//! The chores (migrations, sweeps, counts of live rows) stay on a small sqlx
//! pool; all open the same file with the same settings. With
//! `sqlite_in_place(true)` the caller's runtime thread runs the transaction
//! (`block_in_place`) instead.

mod ask;
mod caller;
mod pool;
mod writer;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use rusqlite::types::ValueRef;
use rusqlite::{params, params_from_iter, Connection};
use smallvec::SmallVec;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

use self::ask::Own;
use self::pool::{DbFile, Pool, WAIT};
use self::writer::{Queued, Writer};
use super::attempt::Attempts;
use super::chores::{by_key_count, chores, marks, sweep_in_batches, Release};
use super::error::{db_error, Failure};
use super::migrate::{self, SQLITE};
use super::row::{Decide, KeyHash, OwnedDecide, RowWrite, Stored};
use super::sweep::BATCH;
use crate::{Millis, StoreError};

/// SQLite's own clock, in ms since the epoch.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// Connections of the sqlx pool for the chores, which are few and short.
const CHORE_CONNECTIONS: u32 = 2;

#[derive(Debug)]
pub(super) struct Sqlite {
    /// For the chores.
    pool: SqlitePool,
    /// For reads.
    conns: Arc<Pool>,
    /// For counts.
    writer: Arc<Writer>,
    sql: Arc<Statements>,
    table: String,
    url_hint: String,
}

/// The statements of a count, built once.
#[derive(Debug)]
struct Statements {
    /// By key count: the clock and the rows of the keys, in one statement.
    select: Vec<String>,
    upsert: String,
    /// A row's new value when its generation and expiry stay: the indexes
    /// (both on `expires_at`) are left as they are, a page written instead of three.
    set_value: String,
    delete: String,
}

impl Sqlite {
    pub(super) async fn open(
        url: &str,
        table: String,
        max_connections: u32,
        in_place: bool,
        durable: bool,
    ) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| StoreError::Setup { detail: format!("bad SQLite URL: {e}"), source: Some(Box::new(e)) })?;
        let path = file_of(url, &options)?;
        let options = options
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(if durable { SqliteSynchronous::Full } else { SqliteSynchronous::Normal })
            .busy_timeout(WAIT);
        // Opening it creates the file and puts it in WAL mode.
        let pool = SqlitePoolOptions::new()
            .max_connections(max_connections.min(CHORE_CONNECTIONS))
            .acquire_timeout(WAIT)
            .connect_with(options)
            .await
            .map_err(|e| db_error("open the SQLite database", e))?;
        let t = &table;
        let sql = Statements {
            select: by_key_count(|n| {
                format!(
                    "SELECT {NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
                     FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN ({})",
                    marks(n)
                )
            }),
            upsert: format!(
                "INSERT INTO {t} (key_hash, generation, value, expires_at, family) VALUES (?, ?, ?, ?, ?) \
                 ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
                 value = excluded.value, expires_at = excluded.expires_at, family = excluded.family"
            ),
            set_value: format!("UPDATE {t} SET value = ? WHERE key_hash = ?"),
            delete: format!("DELETE FROM {t} WHERE key_hash = ?"),
        };
        let sql = Arc::new(sql);
        Ok(Sqlite {
            pool,
            conns: Pool::new(DbFile { path: path.clone(), durable }, max_connections, in_place),
            writer: Writer::new(DbFile { path, durable }, sql.clone(), in_place),
            sql,
            url_hint: crate::secret::redact(url),
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

    pub(super) async fn read(&self, hashes: &[KeyHash]) -> Result<(Vec<Option<Stored>>, Millis), StoreError> {
        let sql = self.sql.clone();
        let hashes: SmallVec<[KeyHash; 4]> = hashes.into();
        self.conns.run(move |conn| Ok(select(conn, &sql, &hashes)?)).await.map_err(|f| f.settled("read"))
    }

    pub(super) fn batched(&self) -> u64 {
        self.writer.batched()
    }

    /// SQLite reads inside each count's own transaction.
    pub(super) fn read_together(&self) -> u64 {
        0
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

    sweep_in_batches!();
}

impl Sqlite {
    /// [`Attempts::locked`] with an owned `decide`, which the writer runs
    /// itself (see `owned.rs`).
    pub(super) async fn locked_owned(
        &self,
        hashes: &[KeyHash],
        generation: i64,
        decide: OwnedDecide,
    ) -> Result<(), Failure> {
        self.writer.count_owned(hashes, generation, decide).await
    }
}

impl Attempts for Sqlite {
    /// The whole transaction in the writer's next batch.
    async fn locked(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure> {
        self.writer.count(hashes, generation, decide).await
    }
}

/// One count, on the writer's thread: nothing is written unless its caller
/// answered the question in time. `BEGIN` and `COMMIT` are cached statements
/// too, not parsed again on every count.
fn count(conn: &Connection, sql: &Statements, q: &Queued, own: &mut Option<Own<'_, '_>>) -> Result<(), Failure> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let done =
        read_decide_write(conn, sql, q, own).and_then(|()| Ok(conn.prepare_cached("COMMIT")?.execute([]).map(drop)?));
    if done.is_err() && !conn.is_autocommit() {
        // If even this fails, the transaction stays open and the pool closes the connection.
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut rollback| rollback.execute([]));
    }
    done
}

/// The inside of a count's transaction: read, ask the caller, write.
fn read_decide_write(
    conn: &Connection,
    sql: &Statements,
    q: &Queued,
    own: &mut Option<Own<'_, '_>>,
) -> Result<(), Failure> {
    let (rows, now) = select(conn, sql, &q.hashes)?;
    let pending = q.ask(&rows, now).ok_or_else(ask::gone)?;
    if let Some(own) = own {
        own.serve();
    }
    let writes = pending.wait(q.until).ok_or_else(ask::gone)?.map_err(Failure::Store)?;
    write(conn, sql, &q.hashes, q.generation, &rows, writes)
}

/// Writes what `decide` answered for the rows it saw.
fn write(
    conn: &Connection,
    sql: &Statements,
    hashes: &[KeyHash],
    generation: i64,
    rows: &[Option<Stored>],
    writes: Vec<RowWrite>,
) -> Result<(), Failure> {
    for ((hash, write), row) in hashes.iter().zip(writes).zip(rows) {
        match write {
            RowWrite::Put { value, expires_at, .. }
                if row.as_ref().is_some_and(|r| r.generation == generation && r.expires_at == expires_at) =>
            {
                conn.prepare_cached(&sql.set_value)?.execute(params![value, &hash[..]])?;
            }
            RowWrite::Put { value, expires_at, family } => {
                conn.prepare_cached(&sql.upsert)?.execute(params![&hash[..], generation, value, expires_at, family])?;
            }
            RowWrite::Delete => {
                conn.prepare_cached(&sql.delete)?.execute([&hash[..]])?;
            }
            RowWrite::Keep => {}
        }
    }
    Ok(())
}

/// The rows of `hashes`, in key order (`None`: no row), and the clock.
fn select(conn: &Connection, sql: &Statements, hashes: &[KeyHash]) -> rusqlite::Result<(Vec<Option<Stored>>, Millis)> {
    let mut statement = conn.prepare_cached(&sql.select[hashes.len()])?;
    let mut found = statement.query(params_from_iter(hashes.iter().map(|h| &h[..])))?;
    let mut rows = vec![None; hashes.len()];
    let mut now = Millis::MIN;
    while let Some(row) = found.next()? {
        now = now.max(row.get(0)?);
        // NULL: the LEFT JOIN found no row at all.
        let ValueRef::Blob(hash) = row.get_ref(1)? else { continue };
        if let Some(i) = hashes.iter().position(|h| h[..] == *hash) {
            rows[i] = Some(Stored { generation: row.get(2)?, value: row.get(3)?, expires_at: row.get(4)? });
        }
    }
    Ok((rows, now))
}

/// The file a `sqlite:` URL names, as sqlx reads it. The store's connections
/// share one file, so only a file database will do: `sqlite://PATH`
/// (relative), `sqlite:///PATH` (absolute) or `sqlite:PATH`, with at most
/// `?mode=rwc` or `?mode=rw` (the file is created if missing either way).
fn file_of(url: &str, options: &SqliteConnectOptions) -> Result<PathBuf, StoreError> {
    let rest = url.trim_start_matches("sqlite://").trim_start_matches("sqlite:");
    let (database, query) = rest.split_once('?').unwrap_or((rest, ""));
    let refuse = |why: String| {
        Err(StoreError::setup(format!(
            "the SQLite store takes sqlite://PATH, optionally with ?mode=rwc: {why} (in {:?})",
            crate::secret::redact(url)
        )))
    };
    if database.is_empty() || database == ":memory:" {
        return refuse("an in-memory database would not be shared between the store's connections".into());
    }
    for param in query.split('&').filter(|p| !p.is_empty()) {
        if !matches!(param, "mode=rw" | "mode=rwc") {
            return refuse(format!("`{param}` is not supported"));
        }
    }
    Ok(options.get_filename().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(url: &str) -> Result<PathBuf, StoreError> {
        file_of(url, &SqliteConnectOptions::from_str(url).unwrap())
    }

    #[test]
    fn urls_name_the_file_sqlx_opens() {
        assert_eq!(file("sqlite://limit-store.db").unwrap(), PathBuf::from("limit-store.db"));
        assert_eq!(file("sqlite:///var/lib/app/limits.db").unwrap(), PathBuf::from("/var/lib/app/limits.db"));
        assert_eq!(file("sqlite:limits.db").unwrap(), PathBuf::from("limits.db"));
        assert_eq!(file("sqlite:///tmp/a.db?mode=rwc").unwrap(), PathBuf::from("/tmp/a.db"));
        assert_eq!(file("sqlite://a.db?mode=rw").unwrap(), PathBuf::from("a.db"));
        assert_eq!(file("sqlite:///tmp/my%20limits.db").unwrap(), PathBuf::from("/tmp/my limits.db"));
    }

    #[test]
    fn urls_the_store_cannot_share_are_refused() {
        for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://?mode=memory", "sqlite://a.db?mode=ro"] {
            let err = file(url).unwrap_err();
            assert!(err.is_setup() && err.to_string().contains("sqlite://PATH"), "{url}: {err}");
        }
        let err = file("sqlite://a.db?cache=shared").unwrap_err();
        assert!(err.to_string().contains("`cache=shared` is not supported"), "{err}");
    }
}
