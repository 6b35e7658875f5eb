//! The SQLite file the store opens: in WAL mode, so that a reader never
//! waits for the writer's transaction and a count never waits for a reader
//! (SPEC §5), and it stays so for every later connection to the file.

use crate::common::db::{put, sqlite_url, SECRET};
use limit_store::DatabaseStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_keeps_its_file_in_wal_mode() {
    let url = sqlite_url("wal");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = DatabaseStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    put(&db, "k", 1, 60_000).await.unwrap();
    let other = rusqlite::Connection::open(url.trim_start_matches("sqlite://")).unwrap();
    let mode: String = other.query_row("PRAGMA journal_mode", [], |row| row.get(0)).unwrap();
    assert_eq!(mode, "wal");
    // A reader's open transaction holds up no count.
    other.execute_batch("BEGIN").unwrap();
    let rows: i64 = other.query_row("SELECT COUNT(*) FROM limit_store", [], |row| row.get(0)).unwrap();
    assert_eq!(rows, 1);
    put(&db, "k", 2, 60_000).await.expect("counted while a reader holds its transaction");
    other.execute_batch("COMMIT").unwrap();
}

/// A store opened on a file that is not there says to migrate, and leaves
/// no empty file behind that would look like a database without its table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_file_is_refused_and_not_created() {
    let url = sqlite_url("missing-file");
    let err = DatabaseStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("limit-store migrate"),
        "{err}"
    );
    assert!(!std::path::Path::new(url.trim_start_matches("sqlite://")).exists(), "no file made");
}
