//! The Redis store's integer counts: a one-part GCRA counted by
//! `Limits::attempt` in one short script on the key's integer, exact across
//! instances, leaving the entry `update` leaves, within the bound; what the
//! script leaves goes by the compare-and-set.

use std::sync::Arc;
use std::time::Duration;

use crate::common::redis::{server, trips, OwnRedis, SECRET};
use limit_store::error::Unavailable;
use limit_store::limits::{Algorithm, Limit, Part};
use limit_store::{update_with, Entry, LimitStore, Limits, MemoryStore, RedisStore, Write};
use serde_json::json;

fn unique(label: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let n = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("lst-{label}-{n:x}")
}

/// Limits of one limit, `door`, of one part, `who`: a GCRA of `budget` an hour.
fn door(store: Arc<dyn LimitStore>, budget: u64) -> Limits {
    let part = Part::new("who", Algorithm::gcra(budget, Duration::from_secs(3600)));
    Limits::builder().store(store).without_presets().limit(Limit::new("door").part(part)).build().unwrap()
}

async fn store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::builder(url).secret(SECRET).prefix(prefix).connect().await.unwrap()
}

/// Two instances race 240 attempts on one key with a budget of 37: exactly
/// 37 are allowed, each count one round trip, and the key holds the entry
/// a count through `update` would leave (the interval, expiring at the TAT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_count_exactly_one_trip_each() {
    let Some(url) = server() else { return };
    let prefix = unique("int-exact");
    let (one, two) = (store(&url, &prefix).await, store(&url, &prefix).await);
    let limits = [door(Arc::new(one.clone()), 37), door(Arc::new(two.clone()), 37)];
    let mut tasks = Vec::new();
    for i in 0..8 {
        let limits = limits[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut allowed = 0;
            for _ in 0..30 {
                allowed += u32::from(limits.attempt("door", &[("who", "ada")]).await.unwrap().allowed);
            }
            allowed
        }));
    }
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap();
    }
    assert_eq!(allowed, 37);
    let (a, b) = (trips(&one).await, trips(&two).await);
    assert_eq!((a.0 + b.0, a.1 + b.1, a.2 + b.2), (240, 0, 0), "one round trip a count, no retry");
    let entry = one.read(&["door:who:ada"]).await.unwrap()[0].clone().expect("the key holds an entry");
    let interval = 3_600_000 / 37;
    assert_eq!(entry.value, json!(interval));
    let read_at = update_with(&one, &["other"], |_, now| (vec![Write::Keep], now)).await.unwrap();
    let ahead = entry.expires_at - read_at;
    assert!((37 * interval - 2_000..=37 * interval).contains(&ahead), "a full bucket's TAT: {ahead} ms ahead");
}

/// Deletes, behind the store's back, the one key under `prefix`; a
/// connection of the test's own and the key's name.
async fn delete_the_only_key(url: &str, prefix: &str) -> (redis::aio::MultiplexedConnection, String) {
    let mut conn = redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut conn).await.unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let _: () = redis::cmd("DEL").arg(&keys[0]).query_async(&mut conn).await.unwrap();
    (conn, keys[0].clone())
}

/// What each store's count gives for `who`, after `seed` was written there.
async fn counted_after(
    limits: &Limits,
    store: &dyn LimitStore,
    who: &str,
    seed: &(serde_json::Value, i64),
) -> (bool, u64) {
    let key = format!("door:who:{who}");
    let (value, ahead) = seed.clone();
    update_with(store, &[&key], |_, now| {
        (vec![Write::Put(Entry { value: value.clone(), expires_at: now + ahead })], ())
    })
    .await
    .unwrap();
    let decided = limits.attempt("door", &[("who", who)]).await.unwrap();
    assert!(decided.degraded.is_none(), "{decided:?}");
    (decided.allowed, decided.remaining)
}

/// An entry the script does not count itself (one counted at another
/// interval, a value that is no integer) is counted by the compare-and-set
/// with the same rule: every answer is the memory store's, whose integer
/// count runs the rule in Rust.
#[tokio::test]
async fn what_the_script_leaves_is_counted_by_update_as_in_memory() {
    let Some(url) = server() else { return };
    let redis = store(&url, &unique("int-update")).await;
    let memory = MemoryStore::new();
    let (on_redis, in_memory) = (door(Arc::new(redis.clone()), 5), door(Arc::new(memory.clone()), 5));
    let interval = 3_600_000 / 5;
    let seeds = [
        ("held-here", (json!(interval), 2 * interval)),
        ("other-interval", (json!(1_000), 3_000)),
        ("other-interval-full", (json!(1_000), 5_000)),
        ("an-object", (json!({"n": 3}), 60_000)),
        ("a-float", (json!(720_000.0), 60_000)),
        ("a-huge-tat", (json!(interval), i64::MAX / 2)),
    ];
    for (who, seed) in &seeds {
        let expected = counted_after(&in_memory, &memory, who, seed).await;
        assert_eq!(counted_after(&on_redis, &redis, who, seed).await, expected, "{who}");
    }
    // An entry past its expiry, still held in its grace: none, to both.
    let short = (json!(interval), 30);
    let key = "door:who:in-grace";
    for store in [&redis as &dyn LimitStore, &memory] {
        let seed = |_: &[Option<Entry>], now| {
            (vec![Write::Put(Entry { value: short.0.clone(), expires_at: now + short.1 })], ())
        };
        update_with(store, &[key], seed).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(60)).await;
    let (late, late_here) = (
        on_redis.attempt("door", &[("who", "in-grace")]).await.unwrap(),
        in_memory.attempt("door", &[("who", "in-grace")]).await.unwrap(),
    );
    assert_eq!((late.allowed, late.remaining), (late_here.allowed, late_here.remaining), "{late:?}");
    assert_eq!(late.remaining, 4);
    let again = on_redis.attempt("door", &[("who", "other-interval")]).await.unwrap();
    let again_here = in_memory.attempt("door", &[("who", "other-interval")]).await.unwrap();
    assert_eq!(
        (again.allowed, again.remaining),
        (again_here.allowed, again_here.remaining),
        "the key kept on the new interval"
    );
}

/// The bound holds for integer counts: a new key past it is answered
/// unavailable (`Full`), nothing written, while held keys keep counting.
#[tokio::test(flavor = "current_thread")]
async fn the_bound_refuses_a_new_key_and_counts_held_ones() {
    let Some(url) = server() else { return };
    let prefix = unique("int-full");
    let redis = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).max_entries(2).connect().await.unwrap();
    let limits = door(Arc::new(redis.clone()), 5);
    // The store's first count for the bound starts now, before any room is
    // held: an add it may miss is one whose room was held before it began.
    tokio::task::yield_now().await;
    for who in ["a", "b"] {
        assert!(limits.attempt("door", &[("who", who)]).await.unwrap().degraded.is_none());
    }
    let full = limits.attempt("door", &[("who", "c")]).await.unwrap();
    assert_eq!(full.degraded, Some(Unavailable::Full), "{full:?}");
    let held = limits.attempt("door", &[("who", "a")]).await.unwrap();
    assert_eq!((held.degraded, held.remaining), (None, 3), "held keys keep counting");
    assert_eq!(redis.read(&["door:who:c"]).await.unwrap(), [None], "nothing written");
    assert_eq!(redis.info().await.unwrap().live_entries, 2);
}

/// A key that holds no string fails its count, unavailable, and the count
/// beside it in the same call is counted.
#[tokio::test(flavor = "current_thread")]
async fn a_key_holding_no_string_fails_only_its_count() {
    let Some(url) = server() else { return };
    let prefix = unique("int-type");
    let redis = store(&url, &prefix).await;
    let limits = door(Arc::new(redis.clone()), 5);
    assert!(limits.attempt("door", &[("who", "warm")]).await.unwrap().degraded.is_none());
    let (mut conn, key) = delete_the_only_key(&url, &prefix).await;
    let _: () = redis::cmd("HSET").arg(&key).arg("f").arg("v").query_async(&mut conn).await.unwrap();
    let (bad, good) =
        tokio::join!(limits.attempt("door", &[("who", "warm")]), limits.attempt("door", &[("who", "new")]));
    assert_eq!(bad.unwrap().degraded, Some(Unavailable::StoreFailed));
    let good = good.unwrap();
    assert_eq!(good.remaining, 4, "{good:?}");
}

/// A write Redis refuses for memory fails its count, unavailable, with
/// nothing written: once Redis has room again the key counts on from where
/// it was.
#[tokio::test(flavor = "current_thread")]
async fn a_write_refused_for_memory_fails_the_count_and_writes_nothing() {
    let Some(own) = OwnRedis::start(&[]) else { return };
    let redis = store(&own.url(), "int-oom").await;
    let limits = door(Arc::new(redis.clone()), 5);
    assert_eq!(limits.attempt("door", &[("who", "ada")]).await.unwrap().remaining, 4);
    assert_eq!(own.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    let refused = limits.attempt("door", &[("who", "ada")]).await.unwrap();
    assert_eq!(refused.degraded, Some(Unavailable::StoreFailed), "{refused:?}");
    assert_eq!(own.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    let after = limits.attempt("door", &[("who", "ada")]).await.unwrap();
    assert_eq!((after.degraded, after.remaining), (None, 3), "nothing was written: {after:?}");
}

/// A grace past what the script counts exactly (Lua's doubles) sends the
/// counts by the compare-and-set: they count as any other, never failing
/// on an expiry Redis can't take.
#[tokio::test(flavor = "current_thread")]
async fn a_grace_past_the_scripts_numbers_counts_by_update() {
    let Some(url) = server() else { return };
    let redis = RedisStore::builder(&url)
        .secret(SECRET)
        .prefix(&unique("int-grace"))
        .expiry_grace(Duration::MAX)
        .connect()
        .await;
    let limits = door(Arc::new(redis.unwrap()), 2);
    let mut got = Vec::new();
    for _ in 0..3 {
        let answer = limits.attempt("door", &[("who", "ada")]).await.unwrap();
        got.push((answer.degraded, answer.allowed, answer.remaining));
    }
    assert_eq!(got, [(None, true, 1), (None, true, 0), (None, false, 0)]);
}

/// A key this instance saw live is counted without room for a new one; if
/// it is gone after all (deleted behind its back), the count is sent again
/// with room and counts it as new, not as a full store.
#[tokio::test(flavor = "current_thread")]
async fn a_key_seen_live_but_gone_is_counted_again_with_room() {
    let Some(url) = server() else { return };
    let prefix = unique("int-gone");
    let redis = store(&url, &prefix).await;
    let limits = door(Arc::new(redis.clone()), 5);
    assert_eq!(limits.attempt("door", &[("who", "ada")]).await.unwrap().remaining, 4);
    delete_the_only_key(&url, &prefix).await;
    let again = limits.attempt("door", &[("who", "ada")]).await.unwrap();
    assert_eq!((again.degraded, again.remaining), (None, 4), "{again:?}");
    assert_eq!(redis.info().await.unwrap().live_entries, 1);
}

/// Counts of several kinds in one call (three limits, costs of 1 and 2, new
/// keys and keys seen live) are each counted on their own step: every key's
/// allowed attempts and remaining budget are the memory store's.
#[tokio::test(flavor = "current_thread")]
async fn counts_of_several_kinds_in_one_call_each_keep_their_own_step() {
    let Some(url) = server() else { return };
    let redis = store(&url, &unique("int-kinds")).await;
    let memory = MemoryStore::new();
    let limits = |store: Arc<dyn LimitStore>| {
        let mut builder = Limits::builder().store(store).without_presets();
        for (name, budget) in [("three", 3), ("five", 5), ("seven", 7)] {
            let part = Part::new("who", Algorithm::gcra(budget, Duration::from_secs(3600)));
            builder = builder.limit(Limit::new(name).part(part));
        }
        builder.build().unwrap()
    };
    let (on_redis, in_memory) = (limits(Arc::new(redis.clone())), limits(Arc::new(memory)));
    let attempts = |limits: Limits| async move {
        let mut answers = Vec::new();
        for round in 0..5 {
            // All of a round's attempts are ready in one turn of the runtime,
            // so they go to Redis in one call; a key is new in a round when
            // its name is, seen live after.
            let round = (0..12).map(|i| {
                let (name, cost) = (["three", "five", "seven"][i % 3], 1 + (i / 3 % 2) as u64);
                let who = format!("k{}", i + 12 * (round % 2));
                let limits = limits.clone();
                async move {
                    let decided = limits.attempt_cost(name, &[("who", &who)], cost).await.unwrap();
                    assert!(decided.degraded.is_none(), "{decided:?}");
                    (decided.allowed, decided.remaining)
                }
            });
            answers.push(futures_util::future::join_all(round).await);
        }
        answers
    };
    let before = redis.info().await.unwrap().one_round_trip;
    let (got, expected) = (attempts(on_redis).await, attempts(in_memory).await);
    assert_eq!(got, expected);
    assert!(got.iter().flatten().any(|(allowed, _)| !allowed), "some budget ran out");
    let trips = redis.info().await.unwrap().one_round_trip - before;
    assert_eq!(trips, 60, "one round trip a count, none by update");
}
