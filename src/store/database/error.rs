//! Database errors as store errors: a lock or statement timeout is a timeout,
//! a deadlock is retried (apply may run again), anything else is the store
//! failing. The source error is kept.

use crate::error::Unavailable;
use crate::StoreError;

/// Codes that mean the server gave up waiting: PostgreSQL lock_not_available
/// and query_canceled, MySQL lock wait timeout.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const TIMEOUT_CODES: &[&str] = &["55P03", "57014", "1205", "HY000:1205"];
/// Codes worth another attempt: PostgreSQL deadlock_detected,
/// serialization_failure and unique_violation; MySQL deadlock.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const RETRY_CODES: &[&str] = &["40P01", "40001", "23505", "1213", "40001:1213"];

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn code(e: &sqlx::Error) -> Option<String> {
    let db = e.as_database_error()?;
    // MySQL reports the SQLSTATE as its code; the number is what tells.
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return Some(my.number().to_string());
    }
    db.code().map(|c| c.into_owned())
}

/// Codes of a migration statement whose change is there already (another
/// process ran the migration at the same time, or its record was lost):
/// MySQL duplicate column (1060), duplicate key name (1061) and a dropped
/// index gone already (1091).
#[cfg(any(feature = "postgres", feature = "mysql"))]
const THERE_ALREADY_CODES: &[&str] = &["1060", "1061", "1091"];

/// True when a migration statement met `e` because its change is there
/// already, so the migration goes on.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn there_already(e: &sqlx::Error) -> bool {
    code(e).is_some_and(|c| THERE_ALREADY_CODES.contains(&c.as_str()))
}

/// Codes of a migration statement that raced the same statement of another
/// process: PostgreSQL's unique_violation (on its catalogs), duplicate_table,
/// duplicate_column and duplicate_object.
#[cfg(any(feature = "postgres", feature = "mysql"))]
const RACED_CODES: &[&str] = &["23505", "42P07", "42701", "42710"];

/// True when a migration statement met `e` racing another process's same
/// change: run again, it finds the change there.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn raced(e: &sqlx::Error) -> bool {
    code(e).is_some_and(|c| RACED_CODES.contains(&c.as_str()))
}

/// True for a failure that a fresh attempt of the same transaction may not meet.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn is_retryable(e: &sqlx::Error) -> bool {
    code(e).is_some_and(|c| RETRY_CODES.contains(&c.as_str()))
}

/// True when the server had ended the connection's session before the
/// statement that met `e` could be applied: PostgreSQL's `admin_shutdown`
/// (57P01), sent when the server stops (fast shutdown, a restart) or
/// terminates the session. A session ended while idle answers it to the
/// next statement, which the server never ran; one ended during a statement
/// rolls it back; a commit holds the signal off until its answer is sent, so
/// a committed statement is always answered in full. A dropped socket with
/// no such answer (a crash, a network fault) may follow a commit, and is not
/// this. MySQL's answers don't tell the two apart, so none of them is this.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn ended_before_applied(e: &sqlx::Error) -> bool {
    code(e).is_some_and(|c| c == "57P01")
}

/// True for an error that says the connection is unusable (closed by the
/// server or the network): a read met it, so it is worth one more read on
/// a fresh connection.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn is_dead_connection(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_)) || ended_before_applied(e)
}

/// `e`, met while doing `what`, as a store error.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn db_error(what: &str, e: sqlx::Error) -> StoreError {
    let timeout =
        matches!(e, sqlx::Error::PoolTimedOut) || code(&e).is_some_and(|c| TIMEOUT_CODES.contains(&c.as_str()));
    let reason = if timeout { Unavailable::Timeout } else { Unavailable::StoreFailed };
    StoreError::Unavailable {
        reason,
        detail: format!("database error while trying to {what}: {e}"),
        source: Some(Box::new(e)),
    }
}

/// True for a SQLite error that only says the database was busy: the
/// connection that met it is fine to use again.
#[cfg(feature = "sqlite")]
pub(super) fn is_busy(e: &rusqlite::Error) -> bool {
    use rusqlite::ErrorCode::{DatabaseBusy, DatabaseLocked};
    matches!(e.sqlite_error_code(), Some(DatabaseBusy | DatabaseLocked))
}

/// `e`, met on one of the SQLite store's own connections while doing `what`,
/// as a store error: busy is a timeout, like the servers' lock timeouts.
#[cfg(feature = "sqlite")]
pub(super) fn lite_error(what: &str, e: rusqlite::Error) -> StoreError {
    let reason = if is_busy(&e) { Unavailable::Timeout } else { Unavailable::StoreFailed };
    StoreError::Unavailable {
        reason,
        detail: format!("database error while trying to {what}: {e}"),
        source: Some(Box::new(e)),
    }
}

/// Why one attempt failed: the database (maybe worth a retry) or the store's
/// own answer (refused input, full, corrupt).
pub(super) enum Failure {
    /// PostgreSQL or MySQL, on sqlx.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    Db(sqlx::Error),
    /// SQLite, on the store's own rusqlite connections: never retried.
    #[cfg(feature = "sqlite")]
    Lite(rusqlite::Error),
    Store(StoreError),
}

impl Failure {
    /// The call's answer when this failure is not tried again.
    pub(super) fn settled(self, what: &str) -> StoreError {
        match self {
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Failure::Db(e) => db_error(what, e),
            #[cfg(feature = "sqlite")]
            Failure::Lite(e) => lite_error(what, e),
            Failure::Store(e) => e,
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Db(e)
    }
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Self {
        Failure::Lite(e)
    }
}

/// Settles one attempt: `None` means try again (a deadlock or a serialization
/// failure, at most 3 times); otherwise the call's answer.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(unused_variables))]
pub(super) fn settle(result: Result<(), Failure>, retries: &mut u32) -> Option<Result<(), StoreError>> {
    match result {
        Ok(()) => Some(Ok(())),
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        Err(Failure::Db(e)) if is_retryable(&e) && *retries < 3 => {
            *retries += 1;
            None
        }
        Err(failure) => Some(Err(failure.settled("count"))),
    }
}
