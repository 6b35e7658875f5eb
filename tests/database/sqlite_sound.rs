//! The SQLite store in safe Rust: its writer thread reaches a count's
//! `decide` only by message, so a caller that leaks its count's future with
//! `mem::forget` and frees what its `apply` borrows crashes nothing; the
//! leaked count writes nothing, and the counts after it go on.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use crate::common::db::{add_one, sqlite_url, value, SECRET};
use limit_store::{DatabaseStore, Entry, LimitStore, Millis, Write};
use serde_json::json;

async fn open() -> (Arc<DatabaseStore>, rusqlite::Connection) {
    let url = sqlite_url("sound");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = DatabaseStore::builder(&url).secret(SECRET).sweep_every(None);
    let other = rusqlite::Connection::open(url.trim_start_matches("sqlite://")).unwrap();
    (Arc::new(db.connect().await.unwrap()), other)
}

/// Polls one count once, forgets its future, and frees what its `apply`
/// borrowed (then reuses that memory).
fn leak_a_count(db: &DatabaseStore, key: &str) {
    let mut borrowed = vec![7u8; 64 * 1024];
    let mut apply = |rows: &[Option<Entry>], now: Millis| {
        borrowed[0] = borrowed[0].wrapping_add(1);
        vec![Write::Put(Entry { value: json!(borrowed.len()), expires_at: now + 60_000 }); rows.len()]
    };
    let keys = [key];
    let mut call = Box::pin(db.update(&keys, &mut apply));
    let polled = call.as_mut().poll(&mut Context::from_waker(Waker::noop()));
    assert!(polled.is_pending(), "the count waits behind the held write lock");
    std::mem::forget(call);
    #[allow(clippy::drop_non_drop)] // the point: the closure and what it borrows go
    drop(apply);
    drop(borrowed);
    let _reuse = vec![0xAAu8; 64 * 1024];
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_count_on_the_writer_thread_writes_nothing() {
    let (db, other) = open().await;
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    leak_a_count(&db, "leaked");
    tokio::time::sleep(Duration::from_millis(100)).await;
    other.execute_batch("COMMIT").unwrap();
    // The writer waits for the leaked caller's answer until its deadline,
    // then goes on; the next count is answered.
    add_one(&db, "after").await;
    assert_eq!(value(&db, "leaked").await, None, "the leaked count wrote nothing");
    assert_eq!(value(&db, "after").await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_count_in_a_batch_held_by_another_caller_writes_nothing() {
    let (db, other) = open().await;
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // The holder's count runs the batches, the leaked one's among them.
    let holder = tokio::spawn({
        let db = db.clone();
        async move { add_one(&db, "holder").await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    leak_a_count(&db, "leaked");
    tokio::time::sleep(Duration::from_millis(100)).await;
    other.execute_batch("COMMIT").unwrap();
    holder.await.unwrap();
    add_one(&db, "after").await;
    assert_eq!(value(&db, "holder").await, Some(1));
    assert_eq!(value(&db, "leaked").await, None, "the leaked count wrote nothing");
    assert_eq!(value(&db, "after").await, Some(1));
}
