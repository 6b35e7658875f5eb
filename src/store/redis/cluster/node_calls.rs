//! One-slot counts of several slots of one node share that node's call
//! (`batch.rs`), on a real cluster (`LIMIT_STORE_TEST_REDIS_CLUSTER`).

use std::time::Duration;

use super::super::count::tests::add_one;
use crate::{LimitStore, RedisStore};

/// A store on the cluster under a prefix of its own, once it knows the
/// slots' primaries.
async fn store(name: &str) -> Option<RedisStore> {
    let url = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER").ok()?;
    let prefix = format!("lst-{name}-{}", std::process::id());
    let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
    add_one(&store, "warm").await;
    let map = store.shared.batcher.slot_map().expect("a cluster store keeps a slot map").clone();
    for _ in 0..200 {
        if map.known() {
            return Some(store);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the store never learned the slots' primaries");
}

/// Counts each of `keys` once, all ready at once; the counts they wrote.
async fn all_at_once(store: &RedisStore, keys: &[String]) -> Vec<u64> {
    futures_util::future::join_all(keys.iter().map(|k| add_one(store, k))).await
}

/// Checks that every one of `keys` holds `n`.
async fn each_holds(store: &RedisStore, keys: &[String], n: u64) {
    for key in keys {
        let entry = store.read(&[key.as_str()]).await.unwrap().pop().flatten();
        assert_eq!(entry.map(|e| e.value), Some(serde_json::json!(n)), "{key}");
    }
}

/// Counts ready at once on keys of many slots go as one call per node, and
/// each is counted once: what they wrote, and what the keys hold after.
#[tokio::test(flavor = "current_thread")]
async fn counts_of_one_nodes_slots_share_a_call() {
    let Some(store) = store("node").await else { return };
    let keys: Vec<String> = (0..48).map(|i| format!("k{i}")).collect();
    assert!(all_at_once(&store, &keys).await.iter().all(|&n| n == 1));
    assert!(all_at_once(&store, &keys).await.iter().all(|&n| n == 2));
    let (across, again) = store.shared.batcher.across();
    // (A count whose lock stripe another holds goes a little later.)
    assert!(across >= 40, "most counts went in node calls: {across}");
    assert_eq!(again, 0, "a known map sends nothing twice");
    each_holds(&store, &keys, 2).await;
}

/// With a stale map (every slot on one node), the counts of the other
/// nodes' slots are answered "not here" by that node, with nothing written,
/// and are sent again to their own slots: each is counted exactly once.
#[tokio::test(flavor = "current_thread")]
async fn counts_a_node_does_not_serve_go_again_to_their_slots() {
    let Some(store) = store("stale").await else { return };
    let keys: Vec<String> = (0..48).map(|i| format!("k{i}")).collect();
    store.shared.batcher.slot_map().unwrap().set_all(0);
    assert!(all_at_once(&store, &keys).await.iter().all(|&n| n == 1));
    let (across, again) = store.shared.batcher.across();
    assert!(across >= 40 && again > 0, "sent in a node's call, some again: {across}, {again}");
    assert!(again < across, "the node served its own slots: {again} of {across}");
    assert!(all_at_once(&store, &keys).await.iter().all(|&n| n == 2));
    each_holds(&store, &keys, 2).await;
}
