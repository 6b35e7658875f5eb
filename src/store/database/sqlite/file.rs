//! The SQLite store's file: which file a `sqlite:` URL names, and how every
//! connection of the store opens it (WAL, the busy timeout, the commits'
//! durability). The store's connections share one file, so only a file
//! database will do.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::WAIT;
use crate::StoreError;

/// Prepared statements kept per connection: the common key counts, the
/// upsert and the delete.
const CACHED_STATEMENTS: usize = 48;

/// The store's SQLite file, and whether its commits wait for the disk
/// (`DatabaseStoreBuilder::durable_commits`).
#[derive(Clone, Debug)]
pub(super) struct DbFile {
    pub(super) path: PathBuf,
    pub(super) durable: bool,
}

impl DbFile {
    /// The file `url` names: `sqlite://PATH` (relative), `sqlite:///PATH`
    /// (absolute) or `sqlite:PATH`, percent-encoded, with at most
    /// `?mode=rwc` or `?mode=rw` (the file is created if missing either way).
    pub(super) fn of_url(url: &str, durable: bool) -> Result<Self, StoreError> {
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
                // Named by its key alone: a value may be a password.
                let key = param.split_once('=').map_or(param, |(key, _)| key);
                return refuse(format!("the parameter `{key}` is not supported"));
            }
        }
        match percent_decoded(database) {
            Some(path) => Ok(DbFile { path: PathBuf::from(path), durable }),
            None => refuse("the path is not valid percent-encoded UTF-8".into()),
        }
    }

    /// Opens one connection: WAL, `synchronous = NORMAL` (`FULL` when
    /// durable), the busy timeout; the file is created if missing.
    pub(super) fn open(&self) -> rusqlite::Result<Connection> {
        self.open_waiting(WAIT)
    }

    /// [`open`](Self::open), waiting at most `wait` for a lock.
    pub(super) fn open_waiting(&self, wait: Duration) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_PRIVATE_CACHE;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(wait)?;
        // Setting WAL on a file that another connection is creating can be
        // answered busy at once, without the busy handler (SQLite's rule
        // against two readers each waiting to write): it is asked again
        // until the wait is over. The pragma answers the mode it set: a row
        // to read, not to execute.
        let started = Instant::now();
        loop {
            match conn.pragma_update_and_check(None, "journal_mode", "wal", |_| Ok(())) {
                Ok(()) => break,
                Err(e) if is_busy(&e) && started.elapsed() < wait => std::thread::sleep(BUSY_AGAIN),
                Err(e) => return Err(e),
            }
        }
        conn.pragma_update(None, "synchronous", if self.durable { "full" } else { "normal" })?;
        conn.set_prepared_statement_cache_capacity(CACHED_STATEMENTS);
        Ok(conn)
    }
}

/// How long a connection whose switch to WAL was answered busy waits
/// before it asks again.
const BUSY_AGAIN: Duration = Duration::from_millis(5);

/// Whether SQLite answered busy or locked.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked))
}

/// `text` with each `%XX` replaced by its byte; `None` for a bad escape or
/// bytes that are not UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&b, after)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(after.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &after[2..];
        } else {
            bytes.push(b);
            rest = after;
        }
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(url: &str) -> Result<PathBuf, StoreError> {
        DbFile::of_url(url, false).map(|f| f.path)
    }

    #[test]
    fn urls_name_their_file() {
        assert_eq!(file("sqlite://limit-store.db").unwrap(), PathBuf::from("limit-store.db"));
        assert_eq!(file("sqlite:///var/lib/app/limits.db").unwrap(), PathBuf::from("/var/lib/app/limits.db"));
        assert_eq!(file("sqlite:limits.db").unwrap(), PathBuf::from("limits.db"));
        assert_eq!(file("sqlite:///tmp/a.db?mode=rwc").unwrap(), PathBuf::from("/tmp/a.db"));
        assert_eq!(file("sqlite://a.db?mode=rw").unwrap(), PathBuf::from("a.db"));
        assert_eq!(file("sqlite:///tmp/my%20limits.db").unwrap(), PathBuf::from("/tmp/my limits.db"));
        assert_eq!(file("sqlite:///tmp/%C3%A9.db").unwrap(), PathBuf::from("/tmp/é.db"));
    }

    #[test]
    fn urls_the_store_cannot_share_are_refused() {
        for url in ["sqlite::memory:", "sqlite://:memory:", "sqlite://?mode=memory", "sqlite://a.db?mode=ro"] {
            let err = file(url).unwrap_err();
            assert!(err.is_setup() && err.to_string().contains("sqlite://PATH"), "{url}: {err}");
        }
        let err = file("sqlite://a.db?cache=shared").unwrap_err();
        assert!(err.to_string().contains("`cache` is not supported"), "{err}");
        // A value is never said: it may be a password.
        let err = file("sqlite://a.db?password=hunter2pw&key=hunter3pw").unwrap_err().to_string();
        assert!(err.contains("`password`") && !err.contains("hunter"), "{err}");
        for bad in ["sqlite://a%2.db", "sqlite://a%zz.db", "sqlite://a%ff.db"] {
            assert!(file(bad).unwrap_err().to_string().contains("percent-encoded"), "{bad}");
        }
    }

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
