//! PostgreSQL's table stays flat under counts (issue 35, item 15): no index
//! on a column every count changes, so updates stay on their row's page
//! (HOT); a quarter of each page free for them; a table made by the first
//! migration is brought there by the next; the sweep, which reads the table
//! by pages, removes every expired row of a table of many pages and no live
//! one.

use std::time::{Duration, Instant};

use crate::common::db::{add_one, put, rand_suffix, server, SECRET};
use limit_store::{DatabaseStore, LimitStore};
use sqlx::{Connection, PgConnection};

/// The table's indexes other than its primary key, and its storage settings.
async fn layout(conn: &mut PgConnection, table: &str) -> (Vec<String>, Vec<String>) {
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE tablename = $1 AND indexname <> $1 || '_pkey' ORDER BY 1",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await
    .unwrap();
    let options: Option<Vec<String>> = sqlx::query_scalar("SELECT reloptions FROM pg_class WHERE relname = $1")
        .bind(table)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    (indexes, options.unwrap_or_default())
}

async fn drop_table(conn: &mut PgConnection, table: &str) {
    sqlx::query(&format!("DROP TABLE IF EXISTS {table}, {table}_migrations")).execute(&mut *conn).await.unwrap();
}

/// A table the first migration made (its indexes on `expires_at`) is
/// migrated to the flat layout, and migrating again changes nothing.
#[tokio::test]
async fn a_table_of_the_first_migration_is_migrated_to_the_flat_layout() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_flat_upgrade_{}", rand_suffix() % 1_000_000_000);
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let first = include_str!("../../migrations/postgres/0001_limit_store.sql").replace("limit_store", &table);
    sqlx::raw_sql(&first).execute(&mut conn).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE TABLE {table}_migrations (version BIGINT PRIMARY KEY); INSERT INTO {table}_migrations VALUES (1)"
    ))
    .execute(&mut conn)
    .await
    .unwrap();
    let (indexes, _) = layout(&mut conn, &table).await;
    assert_eq!(indexes, [format!("{table}_expires"), format!("{table}_generation")], "as the first migration made it");
    for _ in 0..2 {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        let (indexes, options) = layout(&mut conn, &table).await;
        assert!(indexes.is_empty(), "no index but the primary key: {indexes:?}");
        assert!(options.contains(&"fillfactor=75".to_owned()), "{options:?}");
        assert!(options.contains(&"autovacuum_vacuum_scale_factor=0.02".to_owned()), "{options:?}");
    }
    drop_table(&mut conn, &table).await;
}

/// Counts of one key update its row in place (heap-only updates), which an
/// index on `expires_at` made impossible: every count changes it.
#[tokio::test]
async fn counts_update_their_row_on_its_page() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_flat_hot_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(None).connect().await.unwrap();
    const COUNTS: i64 = 200;
    for _ in 0..COUNTS {
        add_one(&store, "flat-hot").await;
    }
    // The server reports its statistics within a second or so.
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let began = Instant::now();
    let (updates, hot) = loop {
        let (updates, hot): (i64, i64) =
            sqlx::query_as("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = $1")
                .bind(&table)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if updates >= COUNTS - 1 || began.elapsed() > Duration::from_secs(10) {
            break (updates, hot);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(updates >= COUNTS - 1, "the counts updated the row: {updates} updates");
    assert!(hot * 10 >= updates * 9, "{hot} of {updates} updates stayed on their row's page");
    drop(store);
    drop_table(&mut conn, &table).await;
}

/// A sweep by pages finds expired rows on every page of a table of many,
/// and leaves the live ones.
#[tokio::test]
async fn the_sweep_by_pages_removes_every_expired_row_and_no_live_one() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_flat_sweep_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(None).connect().await.unwrap();
    // Expiring and live rows side by side on each page.
    for i in 0..3_000 {
        let ttl = if i % 2 == 0 { 1 } else { 600_000 };
        put(&store, &format!("flat-sweep-{i}"), 1, ttl).await.unwrap();
    }
    let mut conn = PgConnection::connect(&url).await.unwrap();
    let pages: i64 =
        sqlx::query_scalar("SELECT pg_relation_size($1) / 8192").bind(&table).fetch_one(&mut conn).await.unwrap();
    assert!(pages > 32, "the rows take many sweep statements' pages: {pages}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(store.sweep().await.unwrap(), 1_500);
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut conn).await.unwrap();
    assert_eq!(left, 1_500);
    assert_eq!(store.info().await.unwrap().live_entries, 1_500);
    assert_eq!(store.sweep().await.unwrap(), 0, "nothing left to sweep");
    drop(store);
    drop_table(&mut conn, &table).await;
}
