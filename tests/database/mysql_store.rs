//! MySQL/MariaDB specifics: values compare as bytes after the migration that
//! converts an existing table in place (and rows get their family column), and the store's clock stays UTC
//! whatever zone the connection would start in.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::common::db::{rand_suffix, server, SECRET};
use limit_store::{update_with, DatabaseStore, Entry, LimitStore, Millis, Write};
use serde_json::json;
use sqlx::{Connection, Executor, MySqlConnection};

/// The first migration's table, as a store of an earlier version left it.
const OLD_TABLE: &str = include_str!("../../migrations/mysql/0001_limit_store.sql");

async fn collation(conn: &mut MySqlConnection, table: &str) -> String {
    sqlx::query_scalar(
        "SELECT collation_name FROM information_schema.columns \
         WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'value'",
    )
    .bind(table)
    .fetch_one(conn)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_migration_makes_an_existing_table_compare_bytes_and_keeps_its_rows() {
    let Some(url) = server("LIMIT_STORE_TEST_MYSQL") else { return };
    let table = format!("limit_store_old_{}", rand_suffix() % 1_000_000);
    let mut conn = MySqlConnection::connect(&url).await.unwrap();
    let create: String = OLD_TABLE.lines().map(|l| l.split("--").next().unwrap()).collect::<Vec<_>>().join("\n");
    conn.execute(create.replace("limit_store", &table).as_str()).await.unwrap();
    conn.execute(format!("CREATE TABLE {table}_migrations (version BIGINT PRIMARY KEY)").as_str()).await.unwrap();
    conn.execute(format!("INSERT INTO {table}_migrations VALUES (1)").as_str()).await.unwrap();
    assert_eq!(collation(&mut conn, &table).await, "utf8mb4_general_ci", "the old table folds case");

    // This version writes each row's family: it refuses the table until the
    // table is migrated, and says how.
    let connect = || DatabaseStore::builder(&url).table(&table).secret(SECRET).sweep_every(None).connect();
    let err = connect().await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("limit-store migrate"),
        "{err}"
    );
    // A row as an earlier version wrote it.
    let value = json!({"t": "É", "n": 3}).to_string();
    sqlx::query(&format!("INSERT INTO {table} (key_hash, generation, value, expires_at) VALUES (?, 1, ?, ?)"))
        .bind(vec![7u8; 32])
        .bind(&value)
        .bind(i64::MAX)
        .execute(&mut conn)
        .await
        .unwrap();

    for _ in 0..2 {
        DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    }
    assert_eq!(collation(&mut conn, &table).await, "utf8mb4_bin");
    let (kept, family): (String, Option<i16>) =
        sqlx::query_as(&format!("SELECT CAST(value AS CHAR), family FROM {table} WHERE key_hash = ?"))
            .bind(vec![7u8; 32])
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!((kept, family), (value, None), "the row survived the conversion, without a family");
    let store = connect().await.unwrap();
    store
        .update(&["kept"], &mut |_: &[Option<Entry>], now: Millis| {
            vec![Write::Put(Entry { value: json!(1), expires_at: now + 600_000 })]
        })
        .await
        .unwrap();
    let families: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table} WHERE family IS NOT NULL"))
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(families, 1, "a new row has its family");
    conn.execute(format!("DROP TABLE {table}, {table}_migrations").as_str()).await.unwrap();
}

/// A time zone of the test's own whose clocks went back an hour 30 minutes
/// ago, so that the local time now happened twice.
struct FoldZone {
    name: String,
    id: u64,
    url: String,
}

impl FoldZone {
    async fn create(url: &str) -> FoldZone {
        let mut conn = MySqlConnection::connect(url).await.unwrap();
        let name = format!("LimitStoreFold{}", rand_suffix() % 1_000_000_000);
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
        conn.execute("INSERT INTO mysql.time_zone (Use_leap_seconds) VALUES ('N')").await.unwrap();
        let id: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()").fetch_one(&mut conn).await.unwrap();
        for sql in [
            format!("INSERT INTO mysql.time_zone_name (Name, Time_zone_id) VALUES ('{name}', {id})"),
            format!(
                "INSERT INTO mysql.time_zone_transition_type (Time_zone_id, Transition_type_id, `Offset`, Is_DST, \
                 Abbreviation) VALUES ({id}, 0, 3600, 1, 'LSS'), ({id}, 1, 0, 0, 'LSW')"
            ),
            format!(
                "INSERT INTO mysql.time_zone_transition (Time_zone_id, Transition_time, Transition_type_id) \
                 VALUES ({id}, {}, 0), ({id}, {}, 1)",
                now - 86_400,
                now - 1_800
            ),
        ] {
            conn.execute(sql.as_str()).await.unwrap();
        }
        let url = format!("{url}{}timezone={name}", if url.contains('?') { '&' } else { '?' });
        FoldZone { name, id, url }
    }
}

impl Drop for FoldZone {
    fn drop(&mut self) {
        let (url, id) = (std::env::var("LIMIT_STORE_TEST_MYSQL").unwrap(), self.id);
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
                let mut conn = MySqlConnection::connect(&url).await.unwrap();
                for table in ["time_zone_transition", "time_zone_transition_type", "time_zone_name", "time_zone"] {
                    let _ = conn.execute(format!("DELETE FROM mysql.{table} WHERE Time_zone_id = {id}").as_str()).await;
                }
            })
        })
        .join();
    }
}

#[tokio::test]
async fn the_clock_is_utc_even_in_a_zone_whose_clocks_just_went_back() {
    let Some(url) = server("LIMIT_STORE_TEST_MYSQL") else { return };
    let zone = FoldZone::create(&url).await;
    // The zone really makes the naive clock jump back an hour.
    let mut conn = MySqlConnection::connect(&zone.url).await.unwrap();
    let (session, naive): (String, f64) =
        sqlx::query_as("SELECT @@session.time_zone, CAST(UNIX_TIMESTAMP(NOW(3)) AS DOUBLE)")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
    assert_eq!(session, zone.name);
    assert!((real - naive - 3600.0).abs() < 60.0, "the test zone folds: naive {naive}, real {real}");

    let table = "limit_store_clock";
    DatabaseStore::builder(&zone.url).table(table).migrate().await.unwrap();
    let store =
        DatabaseStore::builder(&zone.url).table(table).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let key = format!("clock-{}", rand_suffix());
    let now = update_with(&store, &[key.as_str()], |_, now| (vec![Write::Keep], now)).await.unwrap();
    let real = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap();
    assert!((real - now).abs() < 60_000, "the store's clock {now} is the real time {real}, not an hour back");
}
