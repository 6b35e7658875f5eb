//! The memory store sweeps in the background, warns at 80% of its bound on
//! live entries only, and a full store's request looks at a bounded part of
//! the store to make room. Expiry is on a manual clock; the sweeper's own
//! timer runs on tokio's paused clock where the test waits for it.

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::ManualClock;
use limit_store::{Entry, LimitStore, MemoryStore, Millis, StoreError, Write};
use serde_json::json;

const T0: Millis = 1_700_000_000_000;

fn store(max: u64) -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(T0);
    (MemoryStore::with_clock(max, Arc::new(clock.clone())), clock)
}

async fn put(store: &MemoryStore, key: &str, ttl: Millis) -> Result<(), StoreError> {
    store
        .update(&[key], &mut |_: &[Option<Entry>], now: Millis| {
            vec![Write::Put(Entry { value: json!(1), expires_at: now + ttl })]
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn the_sweeper_removes_expired_entries_unasked() {
    let (store, clock) = store(100);
    for i in 0..5 {
        put(&store, &format!("k{i}"), 1_000).await.unwrap();
    }
    put(&store, "live", 3_600_000).await.unwrap();
    clock.advance(Duration::from_secs(2));
    assert_eq!(store.stats().unwrap().held, 6, "nothing swept yet");
    // The sweeper runs unasked every minute.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(store.stats().unwrap().held, 1, "the sweeper removed the five expired entries");
}

#[tokio::test]
async fn expired_entries_near_the_bound_are_swept_before_any_warning() {
    let logs = crate::common::capture_logs();
    let (store, clock) = store(10);
    for i in 0..7 {
        put(&store, &format!("old{i}"), 1_000).await.unwrap();
    }
    clock.advance(Duration::from_secs(2));
    // Eight held (80%), but only one is live: the sweeper runs, and finds no cause to warn.
    put(&store, "new", 60_000).await.unwrap();
    for _ in 0..100 {
        if store.stats().unwrap().held == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.stats().unwrap().held, 1, "the sweeper ran when the store neared its bound");
    assert!(logs.lines_of_kind("limit-store-filling").is_empty(), "{:#?}", logs.lines_of_kind("limit-store-filling"));
}

#[tokio::test]
async fn a_dropped_stores_sweeper_stops() {
    let alive = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let before = alive();
    let (store, _clock) = store(10);
    assert_eq!(alive(), before + 1, "one sweeper");
    drop(store);
    tokio::task::yield_now().await;
    assert_eq!(alive(), before, "the sweeper stopped with its store");
}

#[test]
fn a_full_stores_request_looks_at_a_bounded_part_of_it() {
    // No runtime: no sweeper, so what is left after the request is what it swept.
    // One family: it holds its share, 80% of the bound, when full.
    let (store, clock) = store(20_000);
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let counted = std::thread::spawn({
        let store = store.clone();
        move || {
            // Filled outside any runtime.
            futures_util::FutureExt::now_or_never(async {
                for i in 0..16_000 {
                    put(&store, &format!("old{i}"), 1_000).await.unwrap();
                }
                assert!(put(&store, "one-more", 1_000).await.is_err(), "the family's share is full");
            })
            .unwrap();
        }
    });
    counted.join().unwrap();
    clock.advance(Duration::from_secs(2));
    runtime.block_on(async {
        let full = futures_util::FutureExt::now_or_never(put(&store, "new", 60_000)).unwrap();
        full.expect("room made from expired entries");
    });
    let left = store.stats().unwrap().held;
    assert!(left > 16_000 - 6_000, "the request swept {} entries, more than a bounded part", 16_000 - left);
}
