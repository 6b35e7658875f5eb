//! PostgreSQL and MySQL: a key's first count on a store that has not seen it
//! (after a deploy or a restart, or on a site with many instances) guesses
//! that its row is missing. A missing row is then counted in one statement; a
//! row that is there (another instance's) in two (PostgreSQL; the first of
//! which read it) or three (MySQL); and whatever a store remembers or
//! guesses, every count lands exactly once.

use std::sync::Arc;

use crate::common::db::{add_one, drop_table, server, value, SECRET};
use limit_store::DatabaseStore;

async fn store(url: &str, table: &str) -> DatabaseStore {
    DatabaseStore::builder(url)
        .table(table)
        .secret(SECRET)
        .sweep_every(None)
        .max_connections(16)
        .connect()
        .await
        .unwrap()
}

/// The servers to test on: PostgreSQL and MySQL, those that are set.
fn servers() -> Vec<String> {
    ["LIMIT_STORE_TEST_POSTGRES", "LIMIT_STORE_TEST_MYSQL"].into_iter().filter_map(server).collect()
}

async fn fresh_table(url: &str, name: &str) -> String {
    let table = format!("ls_first_{name}_{}", crate::common::db::rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(url).table(&table).migrate().await.unwrap();
    table
}

/// A store just connected counts a key it has not seen, whose row is
/// missing, in one statement: connecting read the database's clock, and the
/// guess "no row" held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_stores_first_count_of_a_new_key_is_one_statement() {
    for url in servers() {
        a_new_stores_first_count_of_a_new_key_on(&url).await;
    }
}

async fn a_new_stores_first_count_of_a_new_key_on(url: &str) {
    let table = fresh_table(url, "new").await;
    let db = store(url, &table).await;
    add_one(&db, "new-key").await;
    let paths = db.info().await.unwrap();
    assert_eq!((paths.one_statement, paths.read_then_write, paths.locked), (1, 0, 0), "{paths:?}");
    assert_eq!(value(&db, "new-key").await, Some(1));
    drop_table(url, &table).await;
}

/// A row another instance wrote is not what a new store guesses: its guess
/// writes nothing and reads the row, and the second statement counts from
/// it. The other instance's memory of the row is now stale: its next guess
/// misses too, and goes on from the row it read. Every count lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_this_store_never_saw_and_a_stale_guess_stay_exact() {
    for url in servers() {
        a_row_this_store_never_saw_and_a_stale_guess_on(&url).await;
    }
}

async fn a_row_this_store_never_saw_and_a_stale_guess_on(url: &str) {
    let table = fresh_table(url, "stale").await;
    let first = store(url, &table).await;
    for _ in 0..3 {
        add_one(&first, "k").await;
    }
    let second = store(url, &table).await;
    add_one(&second, "k").await;
    assert_eq!(value(&second, "k").await, Some(4), "the row the second store never saw was counted on");
    let paths = second.info().await.unwrap();
    assert_eq!((paths.one_statement, paths.read_then_write), (0, 1), "a missed guess, then its write: {paths:?}");

    let before = first.info().await.unwrap();
    add_one(&first, "k").await; // remembers 3: stale
    assert_eq!(value(&first, "k").await, Some(5), "the stale guess wrote nothing; the count landed once");
    let after = first.info().await.unwrap();
    assert_eq!(after.read_then_write, before.read_then_write + 1, "{before:?} then {after:?}");

    add_one(&second, "k").await; // remembers 4, but the row is 5 now
    add_one(&second, "k").await; // remembers 6: right
    assert_eq!(value(&second, "k").await, Some(7));
    assert_eq!(second.info().await.unwrap().one_statement, 1, "{:?}", second.info().await.unwrap());
    drop_table(url, &table).await;
}

/// Three stores, as three instances just started, count the same keys at
/// once, half of whose rows exist already: guesses of missing rows go
/// together under load, collide with the others' inserts and with rows they
/// never saw, and every count still lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_new_stores_on_the_same_keys_stay_exact() {
    for url in servers() {
        three_new_stores_on_the_same_keys_on(&url).await;
    }
}

async fn three_new_stores_on_the_same_keys_on(url: &str) {
    let table = fresh_table(url, "three").await;
    let before = store(url, &table).await;
    for i in (0..60).step_by(2) {
        add_one(&before, &format!("k{i}")).await;
    }
    drop(before);
    let stores =
        [Arc::new(store(url, &table).await), Arc::new(store(url, &table).await), Arc::new(store(url, &table).await)];
    let tasks: Vec<_> = (0..48)
        .map(|t| {
            let db = stores[t % 3].clone();
            tokio::spawn(async move {
                for i in 0..30 {
                    add_one(&db, &format!("k{}", (t * 11 + i) % 60)).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let mut total = 0;
    for i in 0..60 {
        total += value(&stores[0], &format!("k{i}")).await.unwrap_or(0);
    }
    assert_eq!(total, 30 + 48 * 30, "every count landed once");
    let mut paths = Vec::new();
    for store in &stores {
        paths.push(store.info().await.unwrap());
    }
    assert!(paths.iter().any(|p| p.one_statement > 0), "{paths:?}");
    drop_table(url, &table).await;
}

/// A new store under load, counting rows another instance wrote: the
/// counts that find no place for a guess alone read their rows in shared
/// statements, then write each only if unchanged, and every count lands
/// once, its row's old count plus one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_never_seen_are_read_together_under_load_and_stay_exact() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = fresh_table(&url, "together").await;
    let before = store(&url, &table).await;
    for i in 0..64 {
        add_one(&before, &format!("k{i}")).await;
    }
    drop(before);
    let db = Arc::new(store(&url, &table).await);
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let db = db.clone();
            tokio::spawn(async move { add_one(&db, &format!("k{i}")).await })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    for i in 0..64 {
        assert_eq!(value(&db, &format!("k{i}")).await, Some(2), "k{i}");
    }
    let paths = db.info().await.unwrap();
    assert!(paths.read_together > 1, "{paths:?}");
    assert_eq!(paths.one_statement, 0, "every row was there, so no guess held: {paths:?}");
    drop_table(&url, &table).await;
}
