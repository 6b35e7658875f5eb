//! The Redis store beyond the contract: how keys are named and hashed, secret
//! rotation, corrupt entries, the bound, scripts lost on the server, eviction
//! and memory refusals, sweep, and the store chosen in the settings.

use std::time::Duration;

use crate::common::redis::{server, trips, OwnRedis, SECRET};
use limit_store::config::Config;
use limit_store::error::Unavailable;
use limit_store::{update_with, Entry, LimitStore, RedisStore, Write};
use redis::AsyncCommands;
use serde_json::json;

fn unique(label: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let n = std::collections::hash_map::RandomState::new().build_hasher().finish();
    format!("lst-{label}-{n:x}")
}

async fn client(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

async fn keys_under(url: &str, prefix: &str) -> Vec<String> {
    client(url).await.keys(format!("{prefix}:*")).await.unwrap()
}

/// Adds one to a count in a 60 s window; the count after.
async fn add_one(store: &dyn LimitStore, key: &str) -> Result<u64, limit_store::StoreError> {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        let expires_at = current[0].as_ref().map_or(now + 60_000, |e| e.expires_at);
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at })], n)
    })
    .await
}

#[tokio::test]
async fn keys_are_hmacs_under_a_prefix_with_the_generation() {
    let Some(url) = server() else { return };
    let prefix = unique("names");
    let store = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).connect().await.unwrap();
    add_one(&store, "sign-in:account:ada@example.com").await.unwrap();
    let keys = keys_under(&url, &prefix).await;
    assert_eq!(keys.len(), 1, "{keys:?}");
    let name = &keys[0];
    let tagged = name
        .strip_prefix(&format!("{prefix}:{:x}:", store.info().await.unwrap().generation))
        .expect("the generation in the name");
    // The family's tag (hashed too), then the key's hash.
    let (tag, hash) = tagged.split_once(':').expect("a family tag");
    assert!(tag.len() == 4 && tag.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    assert!(hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{name}");
    let stored: String = client(&url).await.get(name).await.unwrap();
    // Not the key's text: "example" has letters that hex (the prefix's
    // suffix, the generation, the hash) can't spell, where "ada" can.
    assert!(!name.contains("example") && !stored.contains("example"), "{name} = {stored}");
    // Redis drops it itself: at the window's end plus the grace.
    let ttl: i64 = client(&url).await.pttl(name).await.unwrap();
    assert!((60_000..=65_000).contains(&ttl), "PTTL {ttl}");
}

#[tokio::test]
async fn a_new_secret_neither_reads_nor_counts_old_entries() {
    let Some(url) = server() else { return };
    let prefix = unique("rotation");
    let old = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).connect().await.unwrap();
    add_one(&old, "k").await.unwrap();
    add_one(&old, "k").await.unwrap();
    let new_secret = format!("{SECRET}, rotated");
    let new = RedisStore::builder(&url).secret(&new_secret).prefix(&prefix).connect().await.unwrap();
    assert_ne!(old.info().await.unwrap().generation, new.info().await.unwrap().generation);
    assert_eq!(new.read(&["k"]).await.unwrap(), vec![None]);
    assert_eq!(new.info().await.unwrap().live_entries, 0, "old entries don't count against the new bound");
    assert_eq!(add_one(&new, "k").await.unwrap(), 1, "the new generation counts afresh");
    // The old generation keeps counting during a rolling deploy, and its
    // entries expire by their own TTL, not sooner.
    assert_eq!(add_one(&old, "k").await.unwrap(), 3);
    assert_eq!(old.info().await.unwrap().live_entries, 1);
    assert_eq!(new.sweep().await.unwrap(), 0);
    assert_eq!(keys_under(&url, &prefix).await.len(), 2);
}

#[tokio::test]
async fn a_corrupt_entry_fails_that_key_and_no_other() {
    let Some(url) = server() else { return };
    let prefix = unique("corrupt");
    let store = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).connect().await.unwrap();
    add_one(&store, "bad").await.unwrap();
    let name = keys_under(&url, &prefix).await.pop().unwrap();
    let _: () = client(&url).await.set_ex(&name, "12|{not json", 60).await.unwrap();
    for err in [store.read(&["bad"]).await.unwrap_err(), add_one(&store, "bad").await.unwrap_err()] {
        assert!(matches!(err, limit_store::StoreError::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(&name[name.len() - 64..]), "names the key's hash: {err}");
    }
    assert_eq!(add_one(&store, "good").await.unwrap(), 1);
    assert!(matches!(store.read(&["good", "bad"]).await.unwrap_err(), limit_store::StoreError::Corrupt { .. }));
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_store_refuses_new_keys_and_keeps_counting_held_ones() {
    let Some(url) = server() else { return };
    let logs = crate::common::capture_logs();
    let prefix = unique("full");
    let store = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).max_entries(3).connect().await.unwrap();
    for key in ["a", "b", "c"] {
        add_one(&store, key).await.unwrap();
    }
    let err = add_one(&store, "d").await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }), "{err}");
    assert_eq!(add_one(&store, "a").await.unwrap(), 2, "held keys keep counting");
    assert_eq!(logs.lines_of_kind("limit-store-full").len(), 1);
    assert_eq!(logs.lines_of_kind("limit-store-filling").len(), 1);
    assert_eq!(keys_under(&url, &prefix).await.len(), 3);
}

/// A sweep's line carries its `kind`, as every line does.
#[tokio::test(flavor = "current_thread")]
async fn a_sweep_says_so_with_its_kind() {
    let Some(url) = server() else { return };
    let logs = crate::common::capture_logs();
    let builder = RedisStore::builder(&url).secret(SECRET).prefix(&unique("swept")).sweep_every(None);
    let store = builder.connect().await.unwrap();
    store.sweep().await.unwrap();
    let lines = logs.lines_of_kind(&limit_store::log::Kind::Swept.to_string());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("removed=0"), "{}", lines[0]);
}

#[tokio::test]
async fn scripts_lost_on_the_server_are_loaded_again() {
    let Some(own) = OwnRedis::start(&[]) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    assert_eq!(add_one(&store, "k").await.unwrap(), 1);
    assert_eq!(own.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(add_one(&store, "k").await.unwrap(), 2);
    assert_eq!(own.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(store.read(&["k"]).await.unwrap()[0].as_ref().unwrap().value, json!({"n": 2}));
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_that_may_evict_is_reported() {
    let Some(own) = OwnRedis::start(&["--maxmemory-policy", "volatile-lru"]) else { return };
    let logs = crate::common::capture_logs();
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    assert!(store.info().await.unwrap().evicts);
    assert_eq!(store.info().await.unwrap().eviction_policy, "volatile-lru");
    let lines = logs.lines_of_kind(&limit_store::log::Kind::RedisEvicts.to_string());
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("ERROR") && lines[0].contains("noeviction"), "{}", lines[0]);
    drop(logs);
    let safe = OwnRedis::start(&[]).unwrap();
    let logs = crate::common::capture_logs();
    assert!(!RedisStore::builder(&safe.url()).secret(SECRET).connect().await.unwrap().info().await.unwrap().evicts);
    assert!(logs.lines_of_kind(&limit_store::log::Kind::RedisEvicts.to_string()).is_empty());
}

#[tokio::test]
async fn a_write_refused_for_memory_is_unavailable_and_says_so() {
    let Some(own) = OwnRedis::start(&[]) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    assert_eq!(add_one(&store, "k").await.unwrap(), 1);
    assert_eq!(own.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    let err = add_one(&store, "k").await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::StoreFailed, .. }), "{err}");
    assert!(err.to_string().contains("OOM"), "{err}");
    assert_eq!(own.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    assert_eq!(add_one(&store, "k").await.unwrap(), 2, "nothing was half-written");
}

#[tokio::test]
async fn with_no_grace_redis_drops_entries_and_sweep_says_zero() {
    let Some(url) = server() else { return };
    let prefix = unique("nograce");
    let store =
        RedisStore::builder(&url).secret(SECRET).prefix(&prefix).expiry_grace(Duration::ZERO).connect().await.unwrap();
    let mut put = |_: &[Option<Entry>], now| vec![Write::Put(Entry { value: json!(1), expires_at: now + 100 })];
    store.update(&["k"], &mut put).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(store.sweep().await.unwrap(), 0);
    assert!(keys_under(&url, &prefix).await.is_empty(), "Redis dropped it at its expiry");
    // With the default grace, an expired entry is dead at once and swept.
    let graced = RedisStore::builder(&url).secret(SECRET).prefix(&prefix).connect().await.unwrap();
    graced.update(&["k"], &mut put).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(graced.read(&["k"]).await.unwrap(), vec![None]);
    assert_eq!(keys_under(&url, &prefix).await.len(), 1, "still held in its grace");
    assert_eq!(graced.sweep().await.unwrap(), 1);
    assert!(keys_under(&url, &prefix).await.is_empty());
}

#[tokio::test]
async fn the_settings_choose_redis_for_the_limits() {
    let Some(url) = server() else { return };
    let mut config = Config::parse("[rate_limit]\nstore = \"redis\"\n").unwrap();
    let err = config.build_limits().await.unwrap_err().to_string();
    assert!(err.contains("LIMIT_STORE_REDIS_URL"), "{err}");
    config
        .apply_env(|var| match var {
            "LIMIT_STORE_REDIS_URL" => Some(url.clone()),
            "LIMIT_STORE_SECRET" => Some(SECRET.to_owned()),
            _ => None,
        })
        .unwrap();
    let limits = config.build_limits().await.unwrap();
    let account = unique("account");
    let parts = [("account", account.as_str()), ("ip", "192.0.2.7")];
    for _ in 0..5 {
        assert!(limits.attempt("sign-in", &parts).await.unwrap().allowed);
    }
    let sixth = limits.attempt("sign-in", &parts).await.unwrap();
    assert!(!sixth.allowed && sixth.retry_after.is_some(), "{sixth:?}");
}

#[tokio::test]
async fn a_count_takes_one_round_trip_when_the_guess_holds_and_two_when_not() {
    let Some(url) = server() else { return };
    let prefix = unique("trips");
    let open = |remember| {
        let (url, prefix) = (url.clone(), prefix.clone());
        async move { RedisStore::builder(&url).secret(SECRET).prefix(&prefix).remember(remember).connect().await.unwrap() }
    };
    let (a, b, plain) = (open(100).await, open(100).await, open(0).await);
    // Warm the clock estimates: the first call of a store reads the clock.
    for store in [&a, &b, &plain] {
        store.read(&["warm"]).await.unwrap();
    }
    assert_eq!(add_one(&a, "k").await.unwrap(), 1);
    assert_eq!(add_one(&a, "k").await.unwrap(), 2);
    assert_eq!(trips(&a).await, (2, 0, 0), "a new key, then one this store wrote last");
    assert_eq!(add_one(&b, "k").await.unwrap(), 3);
    assert_eq!(trips(&b).await, (0, 1, 0), "another instance's key: the guess of none missed");
    assert_eq!(add_one(&a, "k").await.unwrap(), 4);
    assert_eq!(trips(&a).await, (2, 1, 0), "what this store remembered was stale");
    assert_eq!(add_one(&plain, "k").await.unwrap(), 5);
    assert_eq!(add_one(&plain, "k").await.unwrap(), 6);
    assert_eq!(trips(&plain).await, (0, 2, 0), "remember(0): always read, then write");
}
