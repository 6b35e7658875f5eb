//! The SQLite store's `update_owned` (as `Limits` counts): the writer runs
//! the count's own `apply` inside the transaction, with no message to the
//! caller. Counts stay exact when many go together; a caller that stopped
//! waiting gets nothing written; one that leaks its future crashes nothing;
//! the bound holds; a panicking `apply` is refused and the store goes on.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use crate::common::db::{add_one, sqlite_url, value, SECRET};
use limit_store::{DatabaseStore, Entry, LimitStore, Millis, OwnedApply, StoreError, Write};
use serde_json::json;

async fn open(name: &str, max_entries: u64) -> (Arc<DatabaseStore>, rusqlite::Connection) {
    let url = sqlite_url(name);
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = DatabaseStore::builder(&url).secret(SECRET).sweep_every(None).max_entries(max_entries);
    let other = rusqlite::Connection::open(url.trim_start_matches("sqlite://")).unwrap();
    (Arc::new(db.connect().await.unwrap()), other)
}

/// An owned `apply` adding one to a bare number, as `add_one` does.
fn plus_one() -> Box<OwnedApply> {
    Box::new(|rows: &[Option<Entry>], now: Millis| {
        let n = rows[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
        vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 60_000 })]
    })
}

async fn owned_add_one(db: &DatabaseStore, key: &str) -> Result<(), StoreError> {
    db.update_owned(&[key], plus_one()).await
}

/// Many callers at once, in batches on the writer's thread: every count is
/// there, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_counts_in_batches_lose_none() {
    let (db, _) = open("owned-exact", 1_000).await;
    let tasks: Vec<_> = (0..16)
        .map(|t| {
            let db = db.clone();
            tokio::spawn(async move {
                for i in 0..40 {
                    owned_add_one(&db, "shared").await.unwrap();
                    // Borrowed and owned counts interleave on the same key.
                    if i % 4 == t % 4 {
                        add_one(&db, "shared").await;
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(value(&db, "shared").await, Some(16 * 40 + 16 * 10));
    assert!(db.info().await.unwrap().batched > 0, "some counts went together");
}

/// Starts an owned count of `key` while `other` holds the write lock, polls
/// it once, hands its future to `then` (which drops or leaks it), and lets
/// the lock go.
async fn behind_a_write_lock<'a>(
    db: &'a DatabaseStore,
    other: &rusqlite::Connection,
    key: &'a str,
    then: impl FnOnce(std::pin::Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + 'a>>),
) {
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut call: std::pin::Pin<Box<dyn Future<Output = _> + Send + 'a>> = Box::pin(owned_add_one(db, key));
    assert!(call.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
    then(call);
    tokio::time::sleep(Duration::from_millis(100)).await;
    other.execute_batch("COMMIT").unwrap();
}

/// A caller that stops waiting while the write lock is held elsewhere gets
/// nothing written; the counts after it go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_owned_count_writes_nothing() {
    let (db, other) = open("owned-dropped", 1_000).await;
    behind_a_write_lock(&db, &other, "dropped", drop).await;
    owned_add_one(&db, "after").await.unwrap();
    assert_eq!(value(&db, "dropped").await, None, "the dropped count wrote nothing");
    assert_eq!(value(&db, "after").await, Some(1));
}

/// A leaked owned count holds nothing it borrowed: its `apply` owns what it
/// uses, so the writer may run it, and nothing crashes. It counts, as a
/// caller still waiting would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_owned_count_is_counted_and_crashes_nothing() {
    let (db, other) = open("owned-leaked", 1_000).await;
    behind_a_write_lock(&db, &other, "leaked", |call| {
        std::mem::forget(call);
        let _reuse = vec![0xAAu8; 64 * 1024];
    })
    .await;
    owned_add_one(&db, "after").await.unwrap();
    assert_eq!(value(&db, "leaked").await, Some(1));
    assert_eq!(value(&db, "after").await, Some(1));
}

/// The bound holds on the owned path: a new key past it is refused with
/// nothing written, and a delete gives its room back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_counts_keep_the_bound() {
    let (db, _) = open("owned-bound", 2).await;
    owned_add_one(&db, "a").await.unwrap();
    owned_add_one(&db, "b").await.unwrap();
    owned_add_one(&db, "a").await.unwrap();
    let full = owned_add_one(&db, "c").await.unwrap_err();
    assert!(
        matches!(full, limit_store::StoreError::Unavailable { reason: limit_store::error::Unavailable::Full, .. }),
        "{full}"
    );
    assert_eq!(value(&db, "c").await, None);
    db.update_owned(&["b"], Box::new(|_: &[Option<Entry>], _| vec![Write::Delete])).await.unwrap();
    owned_add_one(&db, "c").await.unwrap();
    assert_eq!((value(&db, "a").await, value(&db, "b").await, value(&db, "c").await), (Some(2), None, Some(1)));
    assert_eq!(db.stats().map(|s| s.held), Some(2));
}

/// A panic in an owned `apply`, run on the writer's thread, is the count's
/// refusal; nothing is written and the writer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_owned_apply_is_refused_and_the_writer_goes_on() {
    let (db, _) = open("owned-panic", 1_000).await;
    owned_add_one(&db, "k").await.unwrap();
    let panics: Box<OwnedApply> = Box::new(|_: &[Option<Entry>], _| panic!("an apply that panics"));
    let refused = db.update_owned(&["k"], panics).await.unwrap_err();
    assert!(matches!(refused, limit_store::StoreError::Refused(_)), "{refused}");
    owned_add_one(&db, "k").await.unwrap();
    assert_eq!(value(&db, "k").await, Some(2));
}
