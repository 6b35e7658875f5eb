//! The Redis store's bound is shared by families of keys (a limit's keys:
//! the text before the first `:`), as the memory store's is: past 80% full a
//! flood of new keys in one family stops at its share, and the other
//! families still count. Keys stay hashed; every instance judges the shares
//! on the whole store's entries once it has counted them.

use crate::common::redis::{server, SECRET};
use limit_store::{update_with, Entry, LimitStore, RedisStore, StoreError, Write};
use serde_json::json;

/// Puts a fresh entry under `key`.
async fn add(store: &RedisStore, key: &str) -> Result<(), StoreError> {
    update_with(store, &[key], |_, now| (vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 })], ()))
        .await
}

/// Adds new keys of `family` until one is refused; how many went in, and
/// the refusal.
async fn fill(store: &RedisStore, family: &str) -> (usize, StoreError) {
    for i in 0..1_000 {
        if let Err(e) = add(store, &format!("{family}:key:{i}")).await {
            return (i, e);
        }
    }
    panic!("{family}: 1,000 new keys in a bound of 100");
}

async fn open(url: &str, prefix: &str) -> RedisStore {
    let store = RedisStore::builder(url).secret(SECRET).prefix(prefix).max_entries(100).connect().await.unwrap();
    // The count at connect runs in the background: let it land first.
    store.sweep().await.unwrap();
    store
}

#[tokio::test(flavor = "current_thread")]
async fn a_flood_in_one_family_leaves_the_others_counting() {
    let Some(url) = server() else { return };
    let prefix = format!("lst-shares-{}-{}", std::process::id(), rand_suffix());
    let store = open(&url, &prefix).await;

    let (flooded, refused) = fill(&store, "flood").await;
    assert_eq!(flooded, 80, "a family alone stops at 80% of the bound");
    let text = refused.to_string();
    assert!(
        matches!(refused, limit_store::StoreError::Unavailable { .. })
            && text.contains("`flood`")
            && text.contains("share"),
        "{text}"
    );
    assert!(!text.contains("key:"), "the refusal names the family, never a key: {text}");

    let (others, _) = fill(&store, "sign-in").await;
    assert_eq!(others, 10, "another family still adds half of the room left");
    add(&store, "flood:key:0").await.expect("a held key keeps counting");

    // A second instance, on the same server: once it has met the family and
    // counted the store, it judges the flood's share on every instance's keys.
    let second = open(&url, &prefix).await;
    assert_eq!(second.stats().expect("the Redis store keeps stats").held, 90);
    second.read(&["flood:probe"]).await.unwrap();
    second.sweep().await.unwrap();
    let err = add(&second, "flood:new").await.unwrap_err();
    assert!(err.to_string().contains("`flood`"), "{err}");
    add(&second, "code-sent:new").await.expect("a third family still counts");
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}
