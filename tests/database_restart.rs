//! A real PostgreSQL restart: the store's pooled connections all die with it.
//! Once the server is back, no call may fail: each dead connection must not
//! fail a call of its own before it is replaced.
//!
//! This file holds one test, so that no other test of this binary uses the
//! server while it restarts; a guard starts the server again even if the
//! test fails.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::db::{server, SECRET};
use common::servers::{postgres, RestartsPostgres};
use limit_store::{DatabaseStore, Entry, LimitStore, Millis, StoreError, Write};
use serde_json::json;

async fn add_one(store: &DatabaseStore, key: &str) -> Result<(), StoreError> {
    store
        .update(&[key], &mut |rows: &[Option<Entry>], now: Millis| {
            let n = rows[0].as_ref().map_or(0, |e| e.value.as_u64().unwrap());
            vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 600_000 })]
        })
        .await
}

/// Counts on `callers` keys at once, `rounds` times; answers the failures.
async fn counts(store: &Arc<DatabaseStore>, callers: usize, rounds: usize) -> Vec<String> {
    let mut failures = Vec::new();
    for round in 0..rounds {
        let calls: Vec<_> = (0..callers)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { add_one(&store, &format!("restart-{i}-{round}")).await })
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
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = "limit_store_restart";
    DatabaseStore::builder(&url).table(table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(table).secret(SECRET).max_connections(8).sweep_every(None);
    let store = Arc::new(store.connect().await.unwrap());
    // Eight connections in the pool, all unused now.
    assert!(counts(&store, 8, 3).await.is_empty());

    let restarts = RestartsPostgres;
    assert!(postgres("stop", &["-m", "fast"]), "pg_ctlcluster stop");
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(restarts); // start, and wait until it answers

    let back = Instant::now();
    let mut first_failures = 0;
    while add_one(&store, "restart-first").await.is_err() {
        first_failures += 1;
        assert!(back.elapsed() < Duration::from_secs(10), "no call succeeded 10 s after the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The dead connections were found by a ping, not by calls: none failed.
    assert_eq!(first_failures, 0, "calls failed on dead pooled connections after the server was back");
    let failures = counts(&store, 8, 8).await;
    assert!(failures.is_empty(), "after the first success: {failures:#?}");
}
