//! The commit point and the locks' leases of a cross-slot update
//! (`PROTOCOL.md`), step by step on a real cluster
//! (`LIMIT_STORE_TEST_REDIS_CLUSTER`): each test plays an update's steps by
//! hand, stops where a process could die, and checks what readers and a
//! late step make of it.

use std::time::{Duration, Instant};

use redis::Value;

use super::lock::body;
use super::resolve::{record, settle_call};
use super::scripts::{Call, Kind};
use crate::store::redis::entry::Raw;
use crate::{LimitStore, RedisStore};

/// A store on the cluster under a prefix of its own.
async fn store(name: &str) -> Option<RedisStore> {
    let url = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER").ok()?;
    let prefix = format!("lst-cp-{name}-{}", std::process::id());
    Some(RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap())
}

/// Two keys in different slots, with their names in the store.
fn two_slots(store: &RedisStore) -> ([String; 2], [String; 2]) {
    let shared = &store.shared;
    let name = |key: &str| {
        let (_, tag) = shared.families.of(shared.bound.counts(), &shared.secret, key);
        store.name(tag, &shared.secret.key_hash(key))
    };
    let slot = |key: &str| super::slot(&shared.secret.key_hash(key));
    let (a, b) = (0..).map(|i| (format!("a{i}"), format!("b{i}"))).find(|(a, b)| slot(a) != slot(b)).unwrap();
    let names = [name(&a), name(&b)];
    ([a, b], names)
}

/// The node clock of `name`'s slot now (ms).
async fn node_now(store: &RedisStore, name: &str) -> i64 {
    let mut call = Call::new(Kind::Resolve);
    // A record that does not exist, of an update that never ran: `RESOLVE`
    // answers `A` (writing a record nobody reads) with the node's clock.
    call.key(name).key(format!("{name}:clock-probe")).arg("0").arg(1_000);
    let answer: Vec<Value> = call.invoke(&mut store.shared.link.conn()).await.unwrap();
    match answer.first() {
        Some(Value::Int(now)) => *now,
        other => panic!("{other:?}"),
    }
}

/// Prewrites update `txn` on `name` (expected to hold nothing) with a lock
/// whose new entry is `1` and whose lease is `lease_ms`.
async fn prewrite(store: &RedisStore, name: &str, primary: &str, txn: &str, lease_ms: u64) -> i64 {
    let now = node_now(store, name).await;
    let new = Raw::from_bytes(format!("{}|1", now + 60_000).into_bytes());
    let mut call = Call::new(Kind::Prewrite);
    call.key(name).arg(txn).arg(lease_ms).arg(now).arg(-1).arg(-1);
    call.arg("").arg(body(primary, &Raw::none(), 0, &new, now + 65_000)).arg(now + 120_000);
    let answer: Vec<Value> = call.invoke(&mut store.shared.link.conn()).await.unwrap();
    assert_eq!(answer.get(1), Some(&Value::Int(1)), "locked: {answer:?}");
    now
}

/// Commits update `txn` on `primary` (expected to hold nothing, to hold `1`
/// after): the commit's status.
async fn commit(store: &RedisStore, primary: &str, txn: &str, now: i64) -> i64 {
    let mut call = Call::new(Kind::Commit);
    call.key(primary).key(record(&store.shared, primary, txn));
    call.arg(txn).arg(now).arg(-1).arg(-1).arg(now + 300_000);
    call.arg("").arg(format!("{}|1", now + 60_000)).arg(now + 65_000);
    let answer: Vec<Value> = call.invoke(&mut store.shared.link.conn()).await.unwrap();
    match answer.get(1) {
        Some(Value::Int(status)) => *status,
        other => panic!("{other:?}"),
    }
}

/// What `keys` hold, as numbers (a read sees through any lock it meets).
async fn held(store: &RedisStore, keys: &[String; 2]) -> Vec<Option<u64>> {
    let keys = [keys[0].as_str(), keys[1].as_str()];
    let entries = store.read(&keys).await.unwrap();
    entries.into_iter().map(|e| e.and_then(|e| e.value.as_u64())).collect()
}

/// An update whose process died after its prewrite: a read sees through the
/// lock at once (the old entry, nothing written); an update of the key waits
/// out the lease, then rolls the update back (`A`), and a commit that lands
/// after that finds the record and writes nothing.
#[tokio::test(flavor = "current_thread")]
async fn a_commit_after_a_writer_rolled_the_update_back_writes_nothing() {
    let Some(store) = store("late").await else { return };
    let (keys, [primary, other]) = two_slots(&store);
    // Before the prewrite: its lease ends 300 ms after it ran, on the node.
    let started = Instant::now();
    let now = prewrite(&store, &other, &primary, "0001", 300).await;
    assert_eq!(held(&store, &keys).await, [None, None], "a read sees the old entries");
    assert_eq!(super::super::count::tests::add_one(&store, &keys[1]).await, 1, "the lock rolled back");
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "the writer waited out the lease: {:?}",
        started.elapsed()
    );
    assert_eq!(commit(&store, &primary, "0001", now).await, 2, "the late commit finds the rollback");
    assert_eq!(held(&store, &keys).await, [None, Some(1)], "nothing of it stays");
}

/// A read never waits on a lock within its lease: it reads the old entry
/// until the update commits, and the new one from the commit on, before any
/// settle; then an update of the key settles the lock forward without
/// waiting for the lease.
#[tokio::test(flavor = "current_thread")]
async fn a_read_sees_through_a_lock_to_the_updates_outcome() {
    let Some(store) = store("through").await else { return };
    let (keys, [primary, other]) = two_slots(&store);
    let started = Instant::now();
    let now = prewrite(&store, &other, &primary, "0004", 60_000).await;
    assert_eq!(held(&store, &keys).await, [None, None], "not committed: the old entries");
    assert_eq!(commit(&store, &primary, "0004", now).await, 1, "committed");
    assert_eq!(held(&store, &keys).await, [Some(1), Some(1)], "committed: the new entries");
    let raw: Vec<u8> = redis::cmd("GET").arg(&other).query_async(&mut store.shared.link.conn()).await.unwrap();
    assert!(super::is_lock(&Raw::from_bytes(raw)), "a read wrote nothing: the lock is still there");
    assert_eq!(super::super::count::tests::add_one(&store, &keys[1]).await, 2, "settled forward, then counted");
    assert!(started.elapsed() < Duration::from_secs(30), "no one waited for the lease: {:?}", started.elapsed());
}

/// An update whose process died after its commit, its other slot never
/// settled: a reader that meets the lock past its lease rolls it forward,
/// and both keys hold the update.
#[tokio::test(flavor = "current_thread")]
async fn a_reader_rolls_a_committed_update_forward() {
    let Some(store) = store("forward").await else { return };
    let (keys, [primary, other]) = two_slots(&store);
    let now = prewrite(&store, &other, &primary, "0002", 1).await;
    assert_eq!(commit(&store, &primary, "0002", now).await, 1, "committed");
    assert_eq!(commit(&store, &primary, "0002", now).await, 1, "a commit sent again answers done");
    assert_eq!(held(&store, &keys).await, [Some(1), Some(1)]);
}

/// A commit whose primary key changed after the update read it writes `A`
/// and nothing else; the other slot's lock settles back to what it held.
#[tokio::test(flavor = "current_thread")]
async fn a_commit_on_a_changed_primary_key_rolls_the_update_back() {
    let Some(store) = store("changed").await else { return };
    let (keys, [primary, other]) = two_slots(&store);
    let now = prewrite(&store, &other, &primary, "0003", 60_000).await;
    super::super::count::tests::add_one(&store, &keys[0]).await;
    assert_eq!(commit(&store, &primary, "0003", now).await, 0, "missed");
    let (done, _) = settle_call(std::slice::from_ref(&other), "0003", "A", None)
        .send(&mut store.shared.link.conn(), 0)
        .await
        .unwrap();
    assert_eq!(done, Value::Int(1));
    assert_eq!(held(&store, &keys).await, [Some(1), None], "only the other count stays");
    assert_eq!(commit(&store, &primary, "0003", now).await, 2, "decided: rolled back");
}
