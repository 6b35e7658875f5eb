//! A real server restart under load (PostgreSQL or MariaDB): tasks count
//! without pause on a store whose pool holds connections used moments ago,
//! the server is stopped and started again, and every call that began once
//! the server answered again must succeed: a pooled connection the restart
//! killed is not a caller's failure. No call may be counted twice or lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use limit_store::{update_with, DatabaseStore, Entry, LimitStore, StoreError, Write};
use parking_lot::Mutex;
use serde_json::json;

/// Tasks counting at once, each on its own key.
const TASKS: usize = 12;

/// One call: when it began and how it ended.
struct Call {
    began: Instant,
    failed: Option<String>,
}

/// Adds one to `key`'s count.
async fn add_one(store: &DatabaseStore, key: &str) -> Result<u64, StoreError> {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + 600_000 })], n)
    })
    .await
}

/// Counts on `store` while `restart` stops and starts its server (and
/// answers once the server answers again); then checks that no call that
/// began after that failed, that counting went on, and that each key holds
/// exactly its acknowledged calls, or more only by calls that failed.
pub async fn restart_under_load(store: DatabaseStore, prefix: &str, restart: impl FnOnce() + Send + 'static) {
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
                    let failed = add_one(&store, &key).await.err().map(|e| e.to_string());
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
