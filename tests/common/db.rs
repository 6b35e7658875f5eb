//! What the database tests share: the secret, server URLs from the
//! environment (a test without one is skipped, saying so), and store pairs.
#![allow(dead_code)]

use std::sync::Arc;

use limit_store::testing::StorePair;
use limit_store::{DatabaseStore, DatabaseStoreBuilder, Entry, LimitStore, Millis, StoreError, Write};
use serde_json::json;
use sqlx::AnyPool;

pub const SECRET: &str = "limit-store-tests-secret-0123456789abcdefghijklmnop";

pub use super::{rand_suffix, server};

/// A fresh SQLite file URL in the temp folder.
pub fn sqlite_url(name: &str) -> String {
    let path = std::env::temp_dir().join(format!("limit-store-{name}-{}-{}.db", std::process::id(), rand_suffix()));
    format!("sqlite://{}", path.display())
}

/// The databases this run can reach (SQLite, and the servers the
/// environment names), each with the same fresh table name for `test`.
pub fn databases(test: &str) -> Vec<(String, String)> {
    sqlx::any::install_default_drivers();
    let table = format!("ls_{test}_{}", rand_suffix() % 1_000_000_000);
    let mut urls = vec![sqlite_url(test)];
    urls.extend(server("LIMIT_STORE_TEST_POSTGRES"));
    urls.extend(server("LIMIT_STORE_TEST_MYSQL"));
    urls.into_iter().map(|u| (u, table.clone())).collect()
}

/// Writes `{"n": n}` under `key`, expiring `ttl` ms from now.
pub async fn put(store: &dyn LimitStore, key: &str, n: u64, ttl: Millis) -> Result<(), StoreError> {
    store
        .update(&[key], &mut |_: &[Option<Entry>], now: Millis| {
            vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + ttl })]
        })
        .await
}

/// A connection pool of the test's own, beside the store's.
pub async fn raw(url: &str) -> AnyPool {
    sqlx::any::install_default_drivers();
    AnyPool::connect(url).await.expect("a raw connection")
}

/// Drops `table` and its migrations' record.
pub async fn drop_table(url: &str, table: &str) {
    let pool = raw(url).await;
    for t in [table.to_owned(), format!("{table}_migrations")] {
        let _ = sqlx::query(&format!("DROP TABLE IF EXISTS {t}")).execute(&pool).await;
    }
}

/// Migrates `table` on `url` and connects two stores with pools of their own,
/// as two instances of a site would. No background sweeper: the sweep case
/// counts what its own sweep removes, and a sweeper racing it would take
/// some first.
pub async fn pair(url: &str, table: &str) -> StorePair {
    pair_with(url, table, |b| b).await
}

/// Migrates `table`, trying again while the database is busy: on SQLite the
/// cases' tables share one file, and a case's burst of writes can hold its
/// lock past a migration's wait on a loaded machine.
async fn migrate(url: &str, table: &str) {
    let mut tries = 0;
    loop {
        match DatabaseStore::builder(url).table(table).migrate().await {
            Ok(()) => return,
            Err(e) if matches!(e, limit_store::StoreError::Unavailable { .. }) && tries < 5 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => panic!("migrate: {e:?}"),
        }
    }
}

/// [`pair`] with more settings for both stores.
pub async fn pair_with(
    url: &str,
    table: &str,
    settings: impl Fn(DatabaseStoreBuilder) -> DatabaseStoreBuilder,
) -> StorePair {
    migrate(url, table).await;
    let open = || async {
        let builder = DatabaseStore::builder(url).table(table).secret(SECRET).max_connections(8).sweep_every(None);
        Arc::new(settings(builder).connect().await.expect("connect"))
    };
    StorePair { first: open().await, second: open().await }
}

/// Adds one to `key`'s count.
pub async fn add_one(db: &DatabaseStore, key: &str) {
    db.update(&[key], &mut |rows: &[Option<Entry>], now: Millis| {
        let n = rows[0].as_ref().map_or(0, |e| e.value.as_u64().unwrap());
        vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 60_000 })]
    })
    .await
    .unwrap();
}

/// `key`'s count, if it has one.
pub async fn value(db: &DatabaseStore, key: &str) -> Option<u64> {
    db.read(&[key]).await.unwrap()[0].as_ref().map(|e| e.value.as_u64().unwrap())
}
