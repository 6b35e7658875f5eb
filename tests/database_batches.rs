//! Counts that wait for the store at the same time go together (one
//! transaction on SQLite): each is still exact, and a count that is refused
//! or whose caller left spoils none of the others in its batch.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::db::{sqlite_url, SECRET};
use limit_store::{DatabaseStore, Entry, LimitStore, Millis, Write};
use serde_json::json;

/// Adds one to `key`'s count.
async fn add_one(db: &DatabaseStore, key: &str) {
    db.update(&[key], &mut |rows: &[Option<Entry>], now: Millis| {
        let n = rows[0].as_ref().map_or(0, |e| e.value.as_u64().unwrap());
        vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 60_000 })]
    })
    .await
    .unwrap();
}

async fn value(db: &DatabaseStore, key: &str) -> Option<u64> {
    db.read(&[key]).await.unwrap()[0].as_ref().map(|e| e.value.as_u64().unwrap())
}

/// The SQLite file behind a `sqlite://` URL.
fn file(url: &str) -> String {
    url.trim_start_matches("sqlite://").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_counts_that_wait_together_commit_together_and_spoil_none() {
    let url = sqlite_url("batches");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = Arc::new(DatabaseStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap());

    // Another writer holds the file: the first count waits in SQLite's busy
    // handler, and every count after it waits in the store's queue.
    let other = rusqlite::Connection::open(file(&url)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let first = tokio::spawn({
        let db = db.clone();
        async move { add_one(&db, "first").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let waiting: Vec<_> = (0..6)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { add_one(&db, &format!("k{i}")).await })
        })
        .collect();
    let refused = tokio::spawn({
        let db = db.clone();
        async move { db.update(&["refused"], &mut |_: &[Option<Entry>], _| vec![Write::Keep, Write::Keep]).await }
    });
    let gone = tokio::spawn({
        let db = db.clone();
        async move { tokio::time::timeout(Duration::from_millis(50), add_one(&db, "gone")).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    other.execute_batch("COMMIT").unwrap();

    first.await.unwrap();
    for w in waiting {
        w.await.unwrap();
    }
    let err = refused.await.unwrap().unwrap_err();
    assert!(err.is_refused(), "{err}");
    assert!(gone.await.unwrap().is_err(), "its caller left before the count ran");

    assert_eq!(value(&db, "first").await, Some(1));
    for i in 0..6 {
        assert_eq!(value(&db, &format!("k{i}")).await, Some(1), "k{i}");
    }
    assert_eq!(value(&db, "refused").await, None, "a refused count writes nothing");
    assert_eq!(value(&db, "gone").await, None, "a count whose caller left writes nothing");
    let paths = db.count_paths();
    assert!(paths.batched >= 6, "the waiting counts went in one transaction: {paths:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_batches_stay_exact_under_many_callers() {
    let url = sqlite_url("batches-exact");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = Arc::new(DatabaseStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap());
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let db = db.clone();
            tokio::spawn(async move {
                for i in 0..100 {
                    // Several counts on one key in one batch: each must see the one before.
                    add_one(&db, &format!("k{}", (t + i) % 5)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut total = 0;
    for i in 0..5 {
        total += value(&db, &format!("k{i}")).await.unwrap();
    }
    assert_eq!(total, 3_200, "every count landed once");
    assert!(db.count_paths().batched > 0, "32 callers should have shared some commits: {:?}", db.count_paths());
}
