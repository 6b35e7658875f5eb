//! Counts that wait for the store at the same time go together (one
//! transaction on SQLite, one statement on PostgreSQL): each is still exact,
//! and a count that is refused or whose caller left spoils none of the others
//! in its batch.

use std::sync::Arc;
use std::time::Duration;

use crate::common::db::{add_one, drop_table, server, sqlite_url, value, SECRET};
use limit_store::{DatabaseStore, Entry, LimitStore, Write};
use sqlx::{Connection, Executor};

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
    assert!(matches!(err, limit_store::StoreError::Refused(_)), "{err}");
    assert!(gone.await.unwrap().is_err(), "its caller left before the count ran");

    assert_eq!(value(&db, "first").await, Some(1));
    for i in 0..6 {
        assert_eq!(value(&db, &format!("k{i}")).await, Some(1), "k{i}");
    }
    assert_eq!(value(&db, "refused").await, None, "a refused count writes nothing");
    assert_eq!(value(&db, "gone").await, None, "a count whose caller left writes nothing");
    let paths = db.info().await.unwrap();
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
    assert!(
        db.info().await.unwrap().batched > 0,
        "32 callers should have shared some commits: {:?}",
        db.info().await.unwrap()
    );
}

/// A PostgreSQL store on a fresh table of its own.
async fn postgres_store(url: &str, table: &str) -> DatabaseStore {
    DatabaseStore::builder(url).table(table).migrate().await.unwrap();
    DatabaseStore::builder(url)
        .table(table)
        .secret(SECRET)
        .sweep_every(None)
        .max_connections(32)
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_guesses_that_wait_go_in_one_statement() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_batches_{}", crate::common::db::rand_suffix() % 1_000_000_000);
    let db = Arc::new(postgres_store(&url, &table).await);
    // Counted once, each row is remembered: the next count on it is a guess.
    for i in 0..20 {
        add_one(&db, &format!("k{i}")).await;
    }
    add_one(&db, "gone").await;

    // Another session holds the table: the guesses in flight wait on it, and
    // the ones after them wait in the store's queue.
    let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
    other.execute("BEGIN").await.unwrap();
    other.execute(format!("LOCK TABLE {table} IN EXCLUSIVE MODE").as_str()).await.unwrap();
    let counts: Vec<_> = (0..20)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { add_one(&db, &format!("k{i}")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let gone = tokio::spawn({
        let db = db.clone();
        async move { tokio::time::timeout(Duration::from_millis(50), add_one(&db, "gone")).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    other.execute("COMMIT").await.unwrap();

    for c in counts {
        c.await.unwrap();
    }
    assert!(gone.await.unwrap().is_err(), "its caller left while it waited");
    for i in 0..20 {
        assert_eq!(value(&db, &format!("k{i}")).await, Some(2), "k{i}: counted once more, exactly");
    }
    assert_eq!(value(&db, "gone").await, Some(1), "a count whose caller left while it waited counts nothing");
    let paths = db.info().await.unwrap();
    // Eight went alone and the first to queue went on its own; the rest together.
    assert!(paths.batched >= 11, "the guesses that queued went in one statement: {paths:?}");
    drop_table(&url, &table).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_batches_stay_exact_beside_another_instance() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_batches_exact_{}", crate::common::db::rand_suffix() % 1_000_000_000);
    let first = Arc::new(postgres_store(&url, &table).await);
    let second = Arc::new(postgres_store(&url, &table).await);
    let tasks: Vec<_> = (0..48)
        .map(|t| {
            // Two instances on the same keys: each one's remembered rows go
            // stale under the other's writes, so batches carry misses too.
            let db = if t % 3 == 0 { second.clone() } else { first.clone() };
            tokio::spawn(async move {
                for i in 0..40 {
                    add_one(&db, &format!("k{}", (t * 7 + i) % 64)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut total = 0;
    for i in 0..64 {
        total += value(&first, &format!("k{i}")).await.unwrap_or(0);
    }
    assert_eq!(total, 48 * 40, "every count landed once");
    let paths = first.info().await.unwrap();
    assert!(paths.batched > 0 && paths.one_statement > 0, "32 callers on one store share statements: {paths:?}");
    drop_table(&url, &table).await;
}
