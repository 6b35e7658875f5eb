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
//! owns its `decide`, and the writer runs it itself (`update_owned.rs`).
//! Reads and the upkeep (sweeps, counts of live rows: [`upkeep`]) run whole
//! on a blocking thread too; they and the writer's batches take their
//! connections from one [`pool`]; a migration opens a connection of its own.
//! All are rusqlite connections that open the one file the same way
//! ([`file`]). No count runs on the caller's runtime thread, so a count
//! stuck on the disk never holds its caller past the guard's deadline.

mod ask;
mod caller;
mod file;
mod pool;
mod upkeep;
mod writer;

use std::sync::Arc;

use rusqlite::types::ValueRef;
use rusqlite::{params, params_from_iter, Connection};
use smallvec::SmallVec;

use self::file::DbFile;
use self::pool::Pool;
use self::writer::{Queued, Writer};
use super::attempt::Attempts;
use super::error::Failure;
use super::row::{Decide, KeyHash, OwnedDecide, RowWrite, Stored};
use super::upkeep::{by_key_count, marks};
use crate::{Millis, StoreError};

/// How long SQLite waits for the write lock, and a call for a connection:
/// either keeps the answer within the guard's 2 s deadline.
const WAIT: std::time::Duration = std::time::Duration::from_millis(1_500);

/// SQLite's own clock, in ms since the epoch.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

#[derive(Debug)]
pub(super) struct Sqlite {
    file: DbFile,
    /// For reads and the upkeep.
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
        durable: bool,
    ) -> Result<Self, StoreError> {
        let file = DbFile::of_url(url, durable)?;
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
        let conns = Pool::new(file.clone(), max_connections);
        let lite = Sqlite {
            writer: Writer::new(conns.clone(), sql.clone()),
            conns,
            file,
            sql,
            url_hint: crate::secret::redact(url),
            table,
        };
        // The first connection creates the file and puts it in WAL mode.
        lite.conns.run(|_| Ok(())).await.map_err(|f| f.settled("open the SQLite database"))?;
        Ok(lite)
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
}

impl Sqlite {
    /// [`Attempts::locked`] with an owned `decide`, which the writer runs
    /// itself (see `update_owned.rs`).
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
fn count(conn: &Connection, sql: &Statements, q: &Queued) -> Result<(), Failure> {
    conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
    let done =
        read_decide_write(conn, sql, q).and_then(|()| Ok(conn.prepare_cached("COMMIT")?.execute([]).map(drop)?));
    if done.is_err() && !conn.is_autocommit() {
        // If even this fails, the transaction stays open and the pool closes the connection.
        let _ = conn.prepare_cached("ROLLBACK").and_then(|mut rollback| rollback.execute([]));
    }
    done
}

/// The inside of a count's transaction: read, ask the caller, write.
fn read_decide_write(conn: &Connection, sql: &Statements, q: &Queued) -> Result<(), Failure> {
    let (rows, now) = select(conn, sql, &q.hashes)?;
    let pending = q.ask(&rows, now).ok_or_else(ask::gone)?;
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
