//! One-slot counts of several slots of one node share that node's call
//! (`batch.rs`), and so do the steps of two-slot counts (`steps.rs`), on a
//! real cluster (`LIMIT_STORE_TEST_REDIS_CLUSTER`).

use std::time::Duration;

use super::super::count::tests::add_one;
use crate::{update_with, Entry, LimitStore, RedisStore, Write};

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

/// Adds one to both keys in one update; the counts it wrote.
async fn add_both(store: &RedisStore, keys: &[String; 2]) -> (u64, u64) {
    let keys = [keys[0].as_str(), keys[1].as_str()];
    update_with(store, &keys, |current, now| {
        let n: Vec<u64> = current.iter().map(|e| e.as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1).collect();
        let put = |n: u64| Write::Put(Entry { value: n.into(), expires_at: now + 60_000 });
        (vec![put(n[0]), put(n[1])], (n[0], n[1]))
    })
    .await
    .unwrap()
}

/// `n` pairs of keys whose two keys lie in different slots, of two
/// primaries (the cross-slot steps), or of one (`one_node`: one
/// compare-and-set there), as the store's map has them.
fn two_slot_pairs(store: &RedisStore, n: usize, one_node: bool) -> Vec<[String; 2]> {
    let hash = |key: &str| store.shared.secret.key_hash(key);
    let apart = |a: &str, b: &str| super::slot(&hash(a)) != super::slot(&hash(b));
    let pairs = (0..).map(|i| [format!("a{i}"), format!("b{i}")]);
    pairs
        .filter(|[a, b]| apart(a, b) && store.shared.batcher.one_node(&[hash(a), hash(b)]) == one_node)
        .take(n)
        .collect()
}

/// Counts `pairs` twice, each pair's count of a round ready at once with
/// the others', and checks each was counted exactly: what each count wrote,
/// and what both keys of each pair hold after.
async fn count_pairs_twice(store: &RedisStore, pairs: &[[String; 2]]) {
    for round in 1..=2 {
        let wrote = futures_util::future::join_all(pairs.iter().map(|pair| add_both(store, pair))).await;
        assert!(wrote.iter().all(|&n| n == (round, round)), "round {round}: {wrote:?}");
    }
    for [a, b] in pairs {
        each_holds(store, &[a.clone(), b.clone()], 2).await;
    }
}

/// Two-slot counts ready at once send their prewrites, commits and settles
/// in one call per node, each step on its own: most steps went in calls
/// with others, none was sent again, and each count landed exactly once.
#[tokio::test(flavor = "current_thread")]
async fn two_slot_counts_share_their_nodes_calls() {
    let Some(store) = store("steps").await else { return };
    let pairs = two_slot_pairs(&store, 24, false);
    count_pairs_twice(&store, &pairs).await;
    let (shared, again, calls) = store.shared.steps.as_ref().expect("a cluster store batches steps").counts();
    // Three steps a count (the other slot's prewrite, the commit, a
    // settle), 48 counts.
    assert!(shared >= 110, "most of the 144 steps went in node calls with others: {shared}");
    assert!(calls <= 48, "fewer calls than counts: {calls}");
    assert_eq!(again, 0, "a known map sends nothing twice");
}

/// Two-slot counts whose slots one primary serves are one compare-and-set
/// there each, in that node's calls, and take no step of the cross-slot
/// protocol. With a stale map (every slot on one node) those the node does
/// not serve are answered so, nothing written, and take the steps: each
/// count still lands exactly once.
#[tokio::test(flavor = "current_thread")]
async fn two_slot_counts_of_one_primary_take_no_steps() {
    let Some(store) = store("one-node").await else { return };
    let pairs = two_slot_pairs(&store, 24, true);
    count_pairs_twice(&store, &pairs).await;
    let steps = store.shared.steps.as_ref().unwrap();
    assert_eq!(steps.counts(), (0, 0, 0), "no step");
    let (across, again) = store.shared.batcher.across();
    assert!(across >= 48 && again == 0, "every count in a node's call: {across}, {again}");
    let pairs = two_slot_pairs(&store, 24, false);
    store.shared.batcher.slot_map().unwrap().set_all(0);
    count_pairs_twice(&store, &pairs).await;
    assert!(steps.counts().2 > 0, "those the node did not serve took the steps");
}

/// With a stale map (every slot on one node), the steps of the other nodes'
/// slots are answered "not here" there, with nothing written, and sent
/// again alone by their keys: each count still lands exactly once.
#[tokio::test(flavor = "current_thread")]
async fn two_slot_steps_a_node_does_not_serve_go_again_alone() {
    let Some(store) = store("steps-stale").await else { return };
    let pairs = two_slot_pairs(&store, 24, false);
    store.shared.batcher.slot_map().unwrap().set_all(0);
    count_pairs_twice(&store, &pairs).await;
    let (shared, again, _) = store.shared.steps.as_ref().unwrap().counts();
    assert!(again > 0 && again < shared, "some sent again, the node's own not: {again} of {shared}");
}

/// Nodes that lost their scripts (a restart, a failover, `SCRIPT FLUSH`)
/// answer the node's call `NOSCRIPT`, having run nothing of it: the script
/// is loaded again and the call sent again, and each count lands once.
#[tokio::test(flavor = "current_thread")]
async fn two_slot_steps_go_on_after_the_nodes_lose_their_scripts() {
    let Some(store) = store("steps-flush").await else { return };
    let pairs = two_slot_pairs(&store, 12, false);
    let mut conn = store.shared.link.cluster().unwrap();
    let () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut conn).await.unwrap();
    count_pairs_twice(&store, &pairs).await;
}

/// A key of a two-slot update that holds no string (something else wrote
/// it) fails the update: on two primaries the prewrite of its slot fails
/// and the update is rolled back; on one, the compare-and-set finds it
/// before it writes. Either way the other key holds nothing of it.
#[tokio::test(flavor = "current_thread")]
async fn a_key_holding_no_string_fails_the_update_and_nothing_of_it_stays() {
    let Some(store) = store("steps-type").await else { return };
    for one_node in [false, true] {
        let [a, b] = two_slot_pairs(&store, 1, one_node).pop().unwrap();
        no_string_fails(&store, &a, &b).await;
    }
}

/// Counts `a` and `b` while `b` holds a hash: an error, and `a` untouched.
async fn no_string_fails(store: &RedisStore, a: &str, b: &str) {
    let shared = &store.shared;
    let (_, tag) = shared.families.of(shared.bound.counts(), &shared.secret, b);
    let name = store.name(tag, &shared.secret.key_hash(b));
    let mut conn = shared.link.cluster().unwrap();
    let _: i64 = redis::cmd("HSET").arg(&name).arg("f").arg("v").query_async(&mut conn).await.unwrap();
    let answer = update_with(store, &[a, b], |_, now| {
        let put = || Write::Put(Entry { value: 1.into(), expires_at: now + 60_000 });
        (vec![put(), put()], ())
    })
    .await;
    let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut conn).await.unwrap();
    assert!(answer.is_err(), "{answer:?}");
    assert_eq!(store.read(&[a]).await.unwrap(), [None], "the other key holds nothing of it");
}
