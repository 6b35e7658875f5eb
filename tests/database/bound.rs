//! The database store's bound keeps its count of live entries without a
//! scan, and keeps it right: adds count in, resets and deletes count out, a
//! sweep makes it exact, and an update that wrote nothing (refused, failed
//! or dropped) holds no room.

use std::time::Duration;

use crate::common::db::{rand_suffix, server, sqlite_url, SECRET};
use limit_store::{DatabaseStore, Entry, LimitStore, Millis, Write};
use serde_json::json;

async fn put(store: &DatabaseStore, keys: &[&str], ttl: Millis) {
    store
        .update(keys, &mut |cur: &[Option<Entry>], now: Millis| {
            vec![Write::Put(Entry { value: json!(1), expires_at: now + ttl }); cur.len()]
        })
        .await
        .unwrap();
}

async fn delete(store: &DatabaseStore, keys: &[&str]) {
    store.update(keys, &mut |cur: &[Option<Entry>], _: Millis| vec![Write::Delete; cur.len()]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_and_expiries_keep_the_count_right() {
    let mut urls = vec![sqlite_url("bound")];
    urls.extend(server("LIMIT_STORE_TEST_POSTGRES"));
    urls.extend(server("LIMIT_STORE_TEST_MYSQL"));
    for url in urls {
        let table = format!("ls_bound_{}", rand_suffix() % 1_000_000_000);
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let store =
            DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(None).connect().await.unwrap();
        for round in 0..5 {
            let keys: Vec<String> = (0..40).map(|i| format!("r{round}-k{i}")).collect();
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            for chunk in refs.chunks(8) {
                put(&store, chunk, 3_600_000).await;
            }
            // A reset, as a successful sign-in makes: 30 of the 40 go.
            for chunk in refs[..30].chunks(6) {
                delete(&store, chunk).await;
            }
            // A put of an expired entry is a delete too.
            put(&store, &refs[30..32], -1).await;
            // And two more that expire by themselves.
            put(&store, &[&format!("r{round}-short-a"), &format!("r{round}-short-b")], 200).await;
            let exact = store.info().await.unwrap().live_entries;
            let estimate = store.stats().unwrap().held;
            assert!(
                estimate >= exact && estimate - exact <= 2 * (round + 1),
                "{url}: round {round}: the count is {estimate}, {exact} are live (only expiries may lag)"
            );
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        store.sweep().await.unwrap();
        assert_eq!(store.stats().unwrap().held, store.info().await.unwrap().live_entries, "{url}: exact after a sweep");
        assert_eq!(store.stats().unwrap().held, 5 * 8, "{url}");

        // An update that wrote nothing holds no room.
        let before = store.stats().unwrap().held;
        let refused = store
            .update(&["refused-a", "refused-b"], &mut |_: &[Option<Entry>], now: Millis| {
                vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 })]
                // one write for two keys
            })
            .await;
        assert!(refused.is_err());
        assert_eq!(store.stats().unwrap().held, before, "{url}: a refused update gives its room back");
    }
}
