//! A real PostgreSQL restart: the store's pooled connections all die with it.
//! Once the server is back, no call may fail: each dead connection must not
//! fail a call of its own before it is replaced.
//!
//! It runs alone (`alone`), so that no other test uses the server while it
//! restarts; a guard starts the server again even if the test fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::db::{server, SECRET};
use crate::common::load::add_one;
use crate::common::servers::stop_postgres;
use limit_store::DatabaseStore;

/// Counts on `callers` keys at once, `rounds` times; answers the failures.
async fn counts(store: &Arc<DatabaseStore>, callers: usize, rounds: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for round in 0..rounds {
        let calls: Vec<_> = (0..callers)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { add_one(&*store, &format!("restart-{i}-{round}")).await })
            })
            .collect();
        for call in calls {
            if let Err(e) = call.await.unwrap() {
                failures.push(e.to_string());
            }
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_no_call_fails() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = "limit_store_restart";
    DatabaseStore::builder(&url).table(table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(table).secret(SECRET).max_connections(8).sweep_every(None);
    let store = Arc::new(store.connect().await.unwrap());
    // Eight connections in the pool, all unused now.
    assert!(counts(&store, 8, 3).await.is_empty());

    let restarts = stop_postgres();
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(restarts); // start, and wait until it answers

    let back = Instant::now();
    let mut first_failures = 0;
    while add_one(&*store, "restart-first").await.is_err() {
        first_failures += 1;
        assert!(back.elapsed() < Duration::from_secs(10), "no call succeeded 10 s after the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The dead connections were found by a ping, not by calls: none failed.
    assert_eq!(first_failures, 0, "calls failed on dead pooled connections after the server was back");
    let failures = counts(&store, 8, 8).await;
    assert!(failures.is_empty(), "after the first success: {failures:#?}");
}
