//! The SQLite store's own connections for reads: a few rusqlite connections,
//! each call run whole on a blocking thread, so that a read costs one hop
//! from the async caller and back instead of one per statement. (Counts go
//! through the writer, on a connection of its own.)

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use super::super::error::{is_busy, Failure};
use crate::error::Unavailable;
use crate::StoreError;

/// How long SQLite waits for the write lock, and a call for a connection:
/// either keeps the answer within the guard's 2 s deadline.
pub(super) const WAIT: Duration = Duration::from_millis(1_500);

/// How long a thread that expects work soon keeps looking before it parks:
/// the writer for the next count before it leaves its thread, a caller next
/// in line for its answer before it lets its runtime thread park, and the
/// writer for a caller's decision (after spinning) before it sleeps. Waking
/// a parked thread costs tens of µs on a small VM, more than a count; a
/// caller whose count was just answered usually sends its next one within
/// this, and then finds the writer still there.
pub(super) const LINGER: Duration = Duration::from_micros(150);

/// Prepared statements kept per connection: the common key counts, the
/// upsert and the delete.
const CACHED_STATEMENTS: usize = 48;

/// At most `size` connections, opened when first needed. A connection whose
/// call failed with anything but busy is closed rather than used again.
#[derive(Debug)]
pub(super) struct Pool {
    file: DbFile,
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection in use; a call holds one until its blocking
    /// work ends, even if its caller stopped waiting.
    permits: Arc<Semaphore>,
    /// Run calls on the caller's thread (`block_in_place`) where the runtime
    /// allows it; see `DatabaseStoreBuilder::sqlite_in_place`.
    in_place: bool,
}

impl Pool {
    pub(super) fn new(file: DbFile, size: u32, in_place: bool) -> Arc<Self> {
        let size = usize::try_from(size).unwrap_or(usize::MAX).clamp(1, Semaphore::MAX_PERMITS);
        let permits = Arc::new(Semaphore::new(size));
        Arc::new(Pool { file, idle: Mutex::new(Vec::with_capacity(size)), permits, in_place })
    }

    /// Runs `work` on one connection on a blocking thread. Waits at most
    /// [`WAIT`] for a connection, then answers unavailable (timeout).
    pub(super) async fn run<T: Send + 'static>(
        self: &Arc<Self>,
        work: impl FnOnce(&mut Connection) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let timed_out = || {
            Failure::Store(StoreError::unavailable(
                Unavailable::Timeout,
                format!("every SQLite connection of this store stayed in use for {WAIT:?}"),
            ))
        };
        let in_place = self.in_place
            && tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread;
        // The semaphore is never closed.
        let waited = tokio::time::timeout(WAIT, self.permits.clone().acquire_owned());
        let Ok(Ok(permit)) = waited.await else { return Err(timed_out()) };
        if in_place {
            // No hop to another thread and back: this worker runs the call
            // while the runtime moves its other tasks to another thread.
            let _permit = permit;
            return tokio::task::block_in_place(|| self.call(work));
        }
        let pool = self.clone();
        // What `work` logs (the bound's lines) goes where the caller's lines go, in its span.
        let dispatch = tracing::dispatcher::get_default(tracing::Dispatch::clone);
        let span = tracing::Span::current();
        let task = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            tracing::dispatcher::with_default(&dispatch, || span.in_scope(|| pool.call(work)))
        });
        match task.await {
            Ok(result) => result,
            Err(e) => Err(Failure::Store(StoreError::Unavailable {
                reason: Unavailable::StoreFailed,
                detail: "a SQLite call panicked".into(),
                source: Some(Box::new(e)),
            })),
        }
    }

    /// `work` on an idle connection, or a new one; the connection goes back
    /// to the idle ones unless `work` failed with more than busy.
    fn call<T>(&self, work: impl FnOnce(&mut Connection) -> Result<T, Failure>) -> Result<T, Failure> {
        let idle = self.idle.lock().pop();
        let mut conn = match idle {
            Some(conn) => conn,
            None => self.file.open()?,
        };
        let result = work(&mut conn);
        let reusable = match &result {
            Err(Failure::Lite(e)) => is_busy(e),
            _ => true,
        };
        // A transaction left open (a rollback that failed) closes with the connection.
        if reusable && conn.is_autocommit() {
            self.idle.lock().push(conn);
        }
        result
    }
}

/// The store's SQLite file, and whether its commits wait for the disk
/// (`DatabaseStoreBuilder::durable_commits`).
#[derive(Clone, Debug)]
pub(super) struct DbFile {
    pub(super) path: PathBuf,
    pub(super) durable: bool,
}

impl DbFile {
    /// Opens one connection the way the store's sqlx pool opens its own: WAL,
    /// `synchronous = NORMAL` (`FULL` when durable), the busy timeout.
    pub(super) fn open(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_PRIVATE_CACHE;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(WAIT)?;
        // This pragma answers the mode it set: a row to read, not to execute.
        conn.pragma_update_and_check(None, "journal_mode", "wal", |_| Ok(()))?;
        conn.pragma_update(None, "synchronous", if self.durable { "full" } else { "normal" })?;
        conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
        Ok(conn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Commits wait for the disk (`FULL`) only when the store is durable;
    /// otherwise `NORMAL`, which in WAL mode does not sync on commit.
    #[test]
    fn synchronous_follows_durable() {
        let path = std::env::temp_dir().join(format!("limit-store-sync-{}.db", std::process::id()));
        for (durable, level) in [(false, 1), (true, 2)] {
            let conn = DbFile { path: path.clone(), durable }.open().unwrap();
            let got: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0)).unwrap();
            assert_eq!(got, level, "durable: {durable}");
        }
        for end in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{end}", path.display()));
        }
    }
}
