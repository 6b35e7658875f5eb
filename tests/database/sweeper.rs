//! The database store's sweeping, on every database: the background
//! sweeper removes expired rows and stops with its store, and a full store
//! makes room from expired rows (never live ones) and says so in its logs.

use std::time::Duration;

use crate::common::db::{databases, drop_table, put, raw, sqlite_url, SECRET};
use limit_store::error::Unavailable;
use limit_store::{DatabaseStore, LimitStore};

/// Rows in `table`, live or expired.
async fn rows(url: &str, table: &str) -> i64 {
    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&raw(url).await).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_runs_in_the_background_and_stops_with_the_store() {
    for (url, table) in databases("sweeper") {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let open = |every| DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(every).connect();
        let writer = open(None).await.unwrap();
        let sweeping = open(Some(Duration::from_millis(200))).await.unwrap();
        for i in 0..5 {
            put(&writer, &format!("k{i}"), 1, 100).await.unwrap();
        }
        put(&writer, "live", 1, 60_000).await.unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(rows(&url, &table).await, 1, "{url}: the background sweeper removed the expired rows");
        drop(sweeping);
        for i in 0..5 {
            put(&writer, &format!("k{i}"), 1, 100).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert_eq!(rows(&url, &table).await, 6, "{url}: a dropped store's sweeper has stopped");
        drop_table(&url, &table).await;
    }
}

/// A store sweeps when it starts, not only after its first interval: rows
/// that expired while no store ran are gone soon after one opens, though
/// the next sweep is an hour away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_sweeps_when_it_starts() {
    for (url, table) in databases("sweep_at_start") {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let open = |every| DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(every).connect();
        let writer = open(None).await.unwrap();
        for i in 0..5 {
            put(&writer, &format!("k{i}"), 1, 50).await.unwrap();
        }
        put(&writer, "live", 1, 60_000).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(rows(&url, &table).await, 6, "{url}: nothing swept yet");
        let _sweeping = open(Some(Duration::from_secs(3600))).await.unwrap();
        let mut left = 6;
        for _ in 0..50 {
            left = rows(&url, &table).await;
            if left == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(left, 1, "{url}: the expired rows are swept at start, the live one kept");
        drop_table(&url, &table).await;
    }
}

/// How many tokio tasks a store leaves behind when it is dropped, after its
/// first sweep (if it sweeps) is done.
async fn tasks_ended_by_drop(url: &str, every: Option<Duration>) -> usize {
    let alive = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let store = DatabaseStore::builder(url).secret(SECRET).sweep_every(every).connect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = alive();
    drop(store);
    tokio::time::sleep(Duration::from_millis(300)).await;
    before - alive()
}

#[tokio::test(flavor = "current_thread")]
async fn a_dropped_stores_sweeper_stops_at_once() {
    let url = sqlite_url("sweeper-stops");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let without = tasks_ended_by_drop(&url, None).await;
    // An hour to the next sweep: only the store's drop can end it now.
    let with = tasks_ended_by_drop(&url, Some(Duration::from_secs(3600))).await;
    assert_eq!(with, without + 1, "dropping the store ends its sleeping sweeper");
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_database_store_makes_room_from_expired_rows_and_logs() {
    let logs = crate::common::capture_logs();
    for (url, table) in databases("full") {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let db = DatabaseStore::builder(&url)
            .table(&table)
            .secret(SECRET)
            // Under 5 entries a bound has no shares: these keys fill it.
            .max_entries(4)
            .sweep_every(None)
            .connect()
            .await
            .unwrap();
        for i in 0..2 {
            put(&db, &format!("short{i}"), 1, 300).await.unwrap();
        }
        put(&db, "long0", 1, 60_000).await.unwrap();
        put(&db, "long1", 1, 60_000).await.unwrap();
        let err = put(&db, "new", 1, 60_000).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }), "{url}: {err}");
        put(&db, "long0", 2, 60_000).await.expect("held keys keep counting");
        // Room is made from expired rows at most once a second.
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        put(&db, "new", 1, 60_000).await.unwrap_or_else(|e| panic!("{url}: expired rows made room: {e}"));
        assert_eq!(db.read(&["long0", "long1"]).await.unwrap().iter().flatten().count(), 2, "{url}: live rows kept");
        drop_table(&url, &table).await;
    }
    assert!(!logs.lines_of_kind("limit-store-filling").is_empty(), "a filling warning");
    assert!(!logs.lines_of_kind("limit-store-full").is_empty(), "a full error");
}
