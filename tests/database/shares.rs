//! The database store's bound is shared by families of keys (a limit's keys:
//! the text before the first `:`), as the memory and Redis stores' are: past
//! 80% full a flood of new keys in one family stops at its share, and the
//! other families still count. Each row holds its family's tag (a keyed hash
//! of the family's name, never the name), so every instance judges the
//! shares on the whole table's rows once it has counted them. On SQLite,
//! PostgreSQL and MariaDB.

use crate::common::db::{databases, drop_table, SECRET};
use limit_store::{update_with, DatabaseStore, Entry, LimitStore, StoreError, Write};
use serde_json::json;

/// Puts a fresh entry under `key`.
async fn add(store: &DatabaseStore, key: &str) -> Result<(), StoreError> {
    update_with(store, &[key], |_, now| (vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 })], ()))
        .await
}

/// Adds new keys of `family` until one is refused; how many went in, and
/// the refusal.
async fn fill(store: &DatabaseStore, family: &str) -> (usize, StoreError) {
    for i in 0..100 {
        if let Err(e) = add(store, &format!("{family}:key:{i}")).await {
            return (i, e);
        }
    }
    panic!("{family}: 100 new keys in a bound of 20");
}

async fn open(url: &str, table: &str) -> DatabaseStore {
    DatabaseStore::builder(url).table(table).secret(SECRET).max_entries(20).sweep_every(None).connect().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_in_one_family_leaves_the_others_counting() {
    for (url, table) in databases("shares") {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let store = open(&url, &table).await;

        let (flooded, refused) = fill(&store, "flood").await;
        assert_eq!(flooded, 16, "{url}: a family alone stops at 80% of the bound");
        let text = refused.to_string();
        assert!(
            matches!(refused, limit_store::StoreError::Unavailable { .. })
                && text.contains("`flood`")
                && text.contains("share"),
            "{url}: {text}"
        );
        assert!(!text.contains("key:"), "{url}: the refusal names the family, never a key: {text}");

        let (others, refused) = fill(&store, "sign-in").await;
        assert_eq!(others, 2, "{url}: another family still adds half of the room left");
        assert!(refused.to_string().contains("`sign-in`"), "{url}: {refused}");
        add(&store, "flood:key:0").await.expect("a held key keeps counting");
        assert_eq!(store.info().await.unwrap().live_entries, 18, "{url}");

        // A second instance on the same table: once it has met the family
        // and counted the rows, it judges the flood's share on every
        // instance's rows.
        let second = open(&url, &table).await;
        assert_eq!(second.stats().unwrap().held, 18, "{url}");
        add(&second, "flood:key:1").await.expect("a held key keeps counting on another instance");
        second.sweep().await.unwrap();
        let err = add(&second, "flood:new").await.unwrap_err();
        assert!(err.to_string().contains("`flood`"), "{url}: {err}");
        add(&second, "code-sent:new").await.expect("a third family still counts");
        drop((store, second));
        drop_table(&url, &table).await;
    }
}

/// The migration that adds the `family` column goes through when two
/// processes run it at once (each may find the other's column or index
/// there), and again later, changing nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_family_migration_runs_at_once_and_again() {
    for (url, table) in databases("shares_migrate") {
        let migrate = || DatabaseStore::builder(&url).table(&table).migrate();
        let (one, two) = tokio::join!(migrate(), migrate());
        one.unwrap_or_else(|e| panic!("{url}: {e}"));
        two.unwrap_or_else(|e| panic!("{url}: {e}"));
        migrate().await.unwrap_or_else(|e| panic!("{url}: again: {e}"));
        let store = open(&url, &table).await;
        add(&store, "api:key:1").await.unwrap();
        assert_eq!(store.info().await.unwrap().live_entries, 1, "{url}");
        drop(store);
        drop_table(&url, &table).await;
    }
}

/// A row written before the `family` column existed holds none; the next
/// count on its key writes the key's family, whichever way the count goes
/// (a remembered row's one statement, or a read and a conditional write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_from_before_the_family_column_takes_its_family_when_counted() {
    for (url, table) in databases("shares_old_row") {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let pool = crate::common::db::raw(&url).await;
        let unset = |sql: &str| sql.replace("{t}", &table);
        let without_family = || async {
            let row = sqlx::query_scalar::<_, i64>(&unset("SELECT COUNT(*) FROM {t} WHERE family IS NULL"))
                .fetch_one(&pool)
                .await
                .unwrap();
            row
        };
        for fresh in [false, true] {
            // `fresh`: a store that has not seen the row, so it reads first.
            let store = open(&url, &table).await;
            add(&store, "api:key:1").await.unwrap();
            sqlx::query(&unset("UPDATE {t} SET family = NULL")).execute(&pool).await.unwrap();
            assert_eq!(without_family().await, 1, "{url}");
            let store = if fresh { open(&url, &table).await } else { store };
            add(&store, "api:key:1").await.unwrap();
            assert_eq!(without_family().await, 0, "{url}: fresh store {fresh}: the count wrote the family");
        }
        drop(pool);
        drop_table(&url, &table).await;
    }
}
