//! The SQLite store's connections: a few rusqlite connections for reads, the
//! upkeep (sweeps, counts of live rows, the checks at connect) and the
//! writer's batches. A read or the upkeep runs whole on a blocking thread, so
//! that a call costs one hop from the async caller and back instead of one
//! per statement; the writer takes a connection on its own thread for each
//! batch. (Migrations open one of their own.)

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::Connection;
use tokio::sync::Semaphore;

use super::super::error::{is_busy, Failure};
use super::file::DbFile;
use super::WAIT;
use crate::error::Unavailable;
use crate::StoreError;

/// How long a thread that expects work soon keeps looking before it parks:
/// the writer for the next count before it leaves its thread, a caller next
/// in line for its answer before it lets its runtime thread park, and the
/// writer for a caller's decision (after spinning) before it sleeps. Waking
/// a parked thread costs tens of µs on a small VM, more than a count; a
/// caller whose count was just answered usually sends its next one within
/// this, and then finds the writer still there.
pub(super) const LINGER: Duration = Duration::from_micros(150);

/// At most `size` calls at once, each on a connection opened when first
/// needed, plus the writer's; a connection whose call failed with anything
/// but busy is closed rather than used again.
#[derive(Debug)]
pub(super) struct Pool {
    file: DbFile,
    idle: Mutex<Vec<Connection>>,
    /// One permit per connection in use; a call holds one until its blocking
    /// work ends, even if its caller stopped waiting.
    permits: Arc<Semaphore>,
}

impl Pool {
    pub(super) fn new(file: DbFile, size: u32) -> Arc<Self> {
        let size = usize::try_from(size).unwrap_or(usize::MAX).clamp(1, Semaphore::MAX_PERMITS);
        let permits = Arc::new(Semaphore::new(size));
        Arc::new(Pool { file, idle: Mutex::new(Vec::with_capacity(size)), permits })
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
        // The semaphore is never closed.
        let waited = tokio::time::timeout(WAIT, self.permits.clone().acquire_owned());
        let Ok(Ok(permit)) = waited.await else { return Err(timed_out()) };
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
        let mut conn = self.take()?;
        let result = work(&mut conn);
        let reusable = match &result {
            Err(Failure::Lite(e)) => is_busy(e),
            _ => true,
        };
        if reusable {
            self.give_back(conn);
        }
        result
    }

    /// An idle connection, or a new one, for work on this thread; give it
    /// back with [`give_back`](Self::give_back) unless the work met an error
    /// that may have left it unusable (then it closes when dropped). No
    /// permit: the writer's one connection comes from here too.
    pub(super) fn take(&self) -> rusqlite::Result<Connection> {
        let idle = self.idle.lock().pop();
        match idle {
            Some(conn) => Ok(conn),
            None => self.file.open(),
        }
    }

    /// Puts a connection back among the idle ones, unless a transaction is
    /// left open on it (a rollback that failed): then it closes.
    pub(super) fn give_back(&self, conn: Connection) {
        if conn.is_autocommit() {
            self.idle.lock().push(conn);
        }
    }
}
