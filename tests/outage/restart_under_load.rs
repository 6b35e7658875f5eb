//! A real server restart under load (PostgreSQL or MariaDB): tasks count
//! without pause on a store whose pool holds connections used moments ago,
//! the server is stopped and started again, and every call that began once
//! the server answered again must succeed: a pooled connection the restart
//! killed is not a caller's failure. No call may be counted twice or lost.
//!
//! Each test runs alone (`alone`), so that no other test uses the server
//! while it restarts; a guard starts the server again even if the test fails.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, server, SECRET};
use crate::common::load::add_one;
use crate::common::servers::{stop_mariadb, stop_postgres};
use limit_store::{DatabaseStore, LimitStore};
use parking_lot::Mutex;

/// Tasks counting at once, each on its own key.
const TASKS: usize = 12;

/// One call: when it began and how it ended.
struct Call {
    began: Instant,
    failed: Option<String>,
}

/// Counts on `store` while `restart` stops and starts its server (and
/// answers once the server answers again); then checks that no call that
/// began after that failed, that counting went on, and that each key holds
/// exactly its acknowledged calls, or more only by calls that failed.
async fn restart_under_load(store: DatabaseStore, prefix: &str, restart: impl FnOnce() + Send + 'static) {
    let store = Arc::new(store);
    let calls: Arc<Mutex<Vec<(usize, Call)>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, calls, stop) = (store.clone(), calls.clone(), stop.clone());
            let key = format!("{prefix}-{t}");
            tokio::spawn(async move {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let began = Instant::now();
                    let failed = add_one(&*store, &key).await.err().map(|e| e.to_string());
                    calls.lock().push((t, Call { began, failed }));
                    // Uneven pauses, so that some pooled connections rest
                    // (for less than the half second after which they are pinged).
                    tokio::time::sleep(Duration::from_millis((t as u64 * 7) % 40)).await;
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let down = Instant::now();
    tokio::task::spawn_blocking(restart).await.expect("the restart");
    let back = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in tasks {
        task.await.expect("a counting task");
    }
    let calls = std::mem::take(&mut *calls.lock());
    let during = calls.iter().filter(|(_, c)| c.began >= down && c.began < back).count();
    let after: Vec<_> = calls.iter().filter(|(_, c)| c.began >= back).collect();
    let failed_after: Vec<&String> = after.iter().filter_map(|(_, c)| c.failed.as_ref()).collect();
    let failed_during = calls.iter().filter(|(_, c)| c.began < back && c.failed.is_some()).count();
    eprintln!(
        "restart took {:?}; {during} calls began during it ({failed_during} failed), {} after it",
        back - down,
        after.len()
    );
    assert!(failed_after.is_empty(), "calls that began after the server was back failed: {failed_after:#?}");
    assert!(after.len() >= TASKS * 10, "counting went on after the restart: {} calls", after.len());
    for t in 0..TASKS {
        let key = format!("{prefix}-{t}");
        let acked = calls.iter().filter(|(k, c)| *k == t && c.failed.is_none()).count() as u64;
        let failed = calls.iter().filter(|(k, c)| *k == t && c.failed.is_some()).count() as u64;
        let read = store.read(&[&key]).await.expect("a read after the restart");
        let stored = read[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
        assert!(
            (acked..=acked + failed).contains(&stored),
            "{key}: stored {stored}, acknowledged {acked}, failed {failed}"
        );
    }
}

/// A store of up to 16 connections on `url`'s table for these tests.
async fn store_on(url: &str) -> DatabaseStore {
    let table = "limit_store_restart_load";
    DatabaseStore::builder(url).table(table).migrate().await.unwrap();
    DatabaseStore::builder(url)
        .table(table)
        .secret(SECRET)
        .max_connections(16)
        .sweep_every(None)
        .connect()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_load_fails_no_call_after_it_is_back() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let prefix = format!("pg-restart-{}", rand_suffix());
    // The guard starts the server again when dropped, and waits until it answers.
    restart_under_load(store_on(&url).await, &prefix, || drop(stop_postgres())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_restarted_under_load_fails_no_call_after_it_is_back() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_MYSQL") else { return };
    let prefix = format!("mariadb-restart-{}", rand_suffix());
    restart_under_load(store_on(&url).await, &prefix, || drop(stop_mariadb())).await;
}
