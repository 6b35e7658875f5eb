//! `MemoryStore` beyond the contract: the bound and its log lines, lazy expiry,
//! sweep, and atomic refusal when full — on a manual clock, never sleeping.

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::ManualClock;
use limit_store::error::Unavailable;
use limit_store::{Entry, LimitStore, MemoryStore, Millis, StoreError, Write};
use serde_json::json;

const T0: Millis = 1_700_000_000_000;

fn store(max: u64) -> (MemoryStore, ManualClock) {
    let clock = ManualClock::new(T0);
    (MemoryStore::with_clock(max, Arc::new(clock.clone())), clock)
}

/// Counts one on each key, live for `ttl` ms from the first count.
async fn count(store: &MemoryStore, keys: &[&str], ttl: Millis) -> Result<(), StoreError> {
    store
        .update(keys, &mut |cur: &[Option<Entry>], now: Millis| {
            cur.iter()
                .map(|e| {
                    let n = e.as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
                    Write::Put(Entry { value: json!(n), expires_at: e.as_ref().map_or(now + ttl, |e| e.expires_at) })
                })
                .collect()
        })
        .await
}

fn value(entries: &[Option<Entry>]) -> Vec<Option<u64>> {
    entries.iter().map(|e| e.as_ref().and_then(|e| e.value.as_u64())).collect()
}

#[tokio::test]
async fn defaults() {
    let store = MemoryStore::new();
    assert_eq!(store.stats().unwrap().max_entries, 100_000);
    assert!(!store.shared());
    assert_eq!(store.stats().unwrap().held, 0);
}

#[tokio::test]
async fn a_full_store_refuses_new_keys_and_keeps_counting_held_ones() {
    let (store, _clock) = store(3);
    for k in ["a", "b", "c"] {
        count(&store, &[k], 60_000).await.unwrap();
    }
    let err = count(&store, &["d"], 60_000).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }), "{err}");
    assert!(err.to_string().contains("max_entries"), "the message says what to do: {err}");
    // Held keys keep counting; nothing live was removed to make room.
    count(&store, &["a"], 60_000).await.unwrap();
    let got = store.read(&["a", "b", "c", "d"]).await.unwrap();
    assert_eq!(value(&got), vec![Some(2), Some(1), Some(1), None]);
    assert_eq!(store.stats().unwrap().held, 3);
}

#[tokio::test]
async fn a_full_update_on_several_keys_writes_none_of_them() {
    let (store, _clock) = store(2);
    count(&store, &["a", "b"], 60_000).await.unwrap();
    store.update(&["a"], &mut |_: &[Option<Entry>], _: Millis| vec![Write::Delete]).await.unwrap();
    count(&store, &["c"], 60_000).await.unwrap();
    let err = count(&store, &["b", "a"], 60_000).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }));
    assert_eq!(value(&store.read(&["a", "b", "c"]).await.unwrap()), vec![None, Some(1), Some(1)], "b was not counted");
}

#[tokio::test]
async fn a_full_store_makes_room_from_expired_entries_only() {
    let (store, clock) = store(3);
    count(&store, &["short"], 1_000).await.unwrap();
    count(&store, &["long-1"], 60_000).await.unwrap();
    count(&store, &["long-2"], 60_000).await.unwrap();
    assert!(count(&store, &["new"], 60_000).await.is_err(), "full while every entry is live");
    clock.advance(Duration::from_millis(1_000)); // `short` expires exactly now
    count(&store, &["new"], 60_000).await.expect("the expired entry made room");
    let got = store.read(&["short", "long-1", "long-2", "new"]).await.unwrap();
    assert_eq!(value(&got), vec![None, Some(1), Some(1), Some(1)]);
    assert_eq!(store.stats().unwrap().held, 3);
}

#[tokio::test]
async fn expired_entries_go_lazily_and_by_sweep() {
    let (store, clock) = store(100);
    for i in 0..10 {
        count(&store, &[&format!("k{i}")], 1_000 + i * 1_000).await.unwrap();
    }
    assert_eq!(store.stats().unwrap().held, 10);
    clock.advance(Duration::from_millis(3_500)); // k0, k1 and k2 have expired
    assert_eq!(store.read(&["k0"]).await.unwrap(), vec![None]);
    // An update that keeps an expired key drops it.
    store.update(&["k0"], &mut |cur: &[Option<Entry>], _: Millis| vec![Write::Keep; cur.len()]).await.unwrap();
    assert_eq!(store.stats().unwrap().held, 9);
    assert_eq!(store.sweep().await.unwrap(), 2, "k1 and k2");
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert_eq!(store.stats().unwrap().held, 7);
    clock.advance(Duration::from_secs(60));
    assert_eq!(store.sweep().await.unwrap(), 7);
    assert_eq!(store.stats().unwrap().held, 0);
}

/// New keys of `families` (one task each, 500 keys a task) counted at once;
/// the keys each family was granted.
async fn flood_at_once(store: &MemoryStore, families: &[&str]) -> Vec<u64> {
    let mut tasks = tokio::task::JoinSet::new();
    for (t, family) in families.iter().enumerate() {
        let (store, family) = (store.clone(), family.to_string());
        tasks.spawn(async move {
            let mut ok = 0u64;
            for i in 0..500 {
                if count(&store, &[&format!("{family}:{t}:{i}")], 60_000).await.is_ok() {
                    ok += 1;
                }
            }
            (t, ok)
        });
    }
    let mut granted = vec![0; families.len()];
    while let Some(done) = tasks.join_next().await {
        let (t, ok) = done.unwrap();
        granted[t] = ok;
    }
    granted
}

/// Eight tasks flooding one family get exactly its 80% of the bound between
/// them; eight more, each its own family, then share what is left without
/// taking its last place, and the count stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_bound_and_the_shares_are_exact_under_concurrency() {
    let (store, _clock) = store(1_000);
    let one: u64 = flood_at_once(&store, &["flood"; 8]).await.iter().sum();
    assert_eq!(one, 800, "exactly one family's share of new keys");
    assert_eq!(store.stats().unwrap().held, 800);
    let families: Vec<String> = (0..8).map(|t| format!("f{t}")).collect();
    let families: Vec<&str> = families.iter().map(String::as_str).collect();
    let each = flood_at_once(&store, &families).await;
    assert!(each.iter().all(|&n| n > 0), "every family added keys: {each:?}");
    assert_eq!(store.stats().unwrap().held, 800 + each.iter().sum::<u64>(), "held exactly what was granted");
    assert!(store.stats().unwrap().held < 1_000, "the last place is never taken: {each:?}");
}

#[tokio::test]
async fn long_keys_are_distinct_and_count_separately() {
    let (store, _clock) = store(10);
    let a = format!("{}a", "k".repeat(1_000));
    let b = format!("{}b", "k".repeat(1_000));
    count(&store, &[&a], 60_000).await.unwrap();
    count(&store, &[&a, &b], 60_000).await.unwrap();
    assert_eq!(value(&store.read(&[&b, &a]).await.unwrap()), vec![Some(1), Some(2)]);
}

#[tokio::test(flavor = "current_thread")]
async fn filling_and_a_full_share_are_logged_once_a_minute() {
    let logs = crate::common::capture_logs();
    let (store, _clock) = store(10);
    for i in 0..20 {
        let _ = count(&store, &[&format!("k{i}")], 60_000).await;
    }
    assert_eq!(store.stats().unwrap().held, 8, "one family (keys without ':') stops at 80%");
    let filling = logs.lines_of_kind("limit-store-filling");
    let share = logs.lines_of_kind("limit-store-full");
    assert_eq!(filling.len(), 1, "{filling:#?}");
    assert!(filling[0].contains("WARN") && filling[0].contains("live=8"), "logged at 80%: {filling:#?}");
    assert_eq!(share.len(), 1, "{share:#?}");
    assert!(share[0].contains("ERROR") && share[0].contains(r#"family="(keys without ':')""#), "{share:#?}");
    assert!(!share[0].contains("k19"), "a family is named, never a key: {share:#?}");
}

/// A bound under 5 has no shares: one family fills it, and the store's own
/// error is logged, once a minute.
#[tokio::test(flavor = "current_thread")]
async fn a_full_store_is_logged_once_a_minute() {
    let logs = crate::common::capture_logs();
    let (store, _clock) = store(4);
    for i in 0..20 {
        let _ = count(&store, &[&format!("k{i}")], 60_000).await;
    }
    assert_eq!(store.stats().unwrap().held, 4);
    let full = logs.lines_of_kind("limit-store-full");
    assert_eq!(full.len(), 1, "{full:#?}");
    assert!(full[0].contains("ERROR") && !full[0].contains("family="), "the store itself, no family: {full:#?}");
}

#[tokio::test]
async fn a_panicking_apply_leaves_the_store_working() {
    let (store, _clock) = store(10);
    count(&store, &["a"], 60_000).await.unwrap();
    let err = store
        .update(&["a", "b"], &mut |_: &[Option<Entry>], _: Millis| -> Vec<Write> { panic!("on purpose") })
        .await
        .unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Refused(_)) && err.to_string().contains("on purpose"), "{err}");
    count(&store, &["a", "b"], 60_000).await.unwrap();
    assert_eq!(value(&store.read(&["a", "b"]).await.unwrap()), vec![Some(2), Some(1)]);
    assert_eq!(store.stats().unwrap().held, 2);
}
