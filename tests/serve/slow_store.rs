//! `serve` on a PostgreSQL store slowed on purpose (its table locked by the
//! test): a flood of `/healthz` never takes an in-flight slot from a sign-in
//! (no attempt is answered `overloaded`), only one health probe reaches the
//! database at once, and a health answer never shows the store's own error.
//! A reload (SIGHUP) keeps the in-flight cap: a call still running from
//! before it keeps its slot.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, raw, server, SECRET};
use crate::common::serve::{scratch, Serve};
use limit_store::DatabaseStore;
use sqlx::AnyPool;

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";

/// `serve` on a fresh table of `url` (settings with `extra` lines), the
/// table's name, the settings file, and a pool of the test's own.
async fn start(url: &str, name: &str, extra: &str) -> (Serve, String, PathBuf, AnyPool) {
    let (table, config) = settings(url, name, extra).await;
    let serve = Serve::start(Some(&config), &[("LIMIT_STORE_SECRET", SECRET)], &[]).await;
    (serve, table, config, raw(url).await)
}

/// Locks `table` until the answer is rolled back: every call of the store
/// on it waits (until the store's lock timeout).
async fn lock(pool: &AnyPool, table: &str) -> sqlx::Transaction<'static, sqlx::Any> {
    let mut lock = pool.begin().await.unwrap();
    sqlx::query(&format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")).execute(&mut *lock).await.unwrap();
    lock
}

/// A fresh table on `url`, and a settings file for it with `extra` lines.
async fn settings(url: &str, name: &str, extra: &str) -> (String, PathBuf) {
    let table = format!("ls_{name}_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(url).table(&table).migrate().await.unwrap();
    let path = scratch(name).join("limit-store.toml");
    let text = format!(
        "[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"\n{extra}\n\
         [rate_limit.limits.sign-in]\nbudget = 100\n"
    );
    std::fs::write(&path, text).unwrap();
    (table, path)
}

/// Reads of `table` waiting for a lock now, as the database sees them.
async fn waiting_reads(pool: &AnyPool, table: &str) -> i64 {
    let sql = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
         AND wait_event_type = 'Lock' AND query LIKE 'SELECT % LEFT JOIN {table} %'"
    );
    sqlx::query_scalar::<_, i64>(&sql).fetch_one(pool).await.unwrap()
}

fn account(i: usize) -> String {
    format!(r#"{{"keys": {{"account": "slow-{i}@example.com", "ip": "192.0.2.80"}}}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_health_checks_never_takes_a_slot_from_an_attempt() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let (serve, table, _, pool) = start(&url, "health_flood", "max_in_flight = 2\ndeadline = \"1s\"").await;
    let lock = lock(&pool, &table).await;
    // The health answer of the start is reused for a second: let it go.
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    let flooding = Arc::new(AtomicBool::new(true));
    let mut flood = Vec::new();
    for _ in 0..20 {
        let (addr, flooding) = (serve.addr.clone(), flooding.clone());
        flood.push(tokio::spawn(async move {
            let mut answers = Vec::new();
            while flooding.load(Ordering::Relaxed) {
                let started = Instant::now();
                let r = crate::common::serve::request(&addr, "GET", "/healthz", &[], b"").await.unwrap();
                answers.push((r.status, r.body, started.elapsed()));
            }
            answers
        }));
    }
    // Health checks alone: one probe in the database at most.
    let started = Instant::now();
    let mut most = 0;
    while started.elapsed() < Duration::from_millis(2_500) {
        most = most.max(waiting_reads(&pool, &table).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(most, 1, "probes waiting in the database at once");
    // Attempts meanwhile reach the store (and wait for its lock): never `overloaded`.
    for i in 0..3 {
        let r = serve.post(SIGN_IN, &account(i)).await;
        assert_eq!(r.status, 503, "{}", r.body);
        assert_eq!(r.json()["degraded"], "timeout", "attempt {i} was refused without reaching the store: {}", r.body);
    }
    flooding.store(false, Ordering::Relaxed);
    for task in flood {
        for (status, body, took) in task.await.unwrap() {
            assert_eq!(status, 503, "{body}");
            assert!(took < Duration::from_millis(2_500), "a health check took {took:?}");
            assert!(!body.contains(&table) && !body.contains("canceling"), "a raw store error: {body}");
        }
    }
    lock.rollback().await.unwrap();
    let started = Instant::now();
    while serve.request("GET", "/healthz", &[], b"").await.unwrap().status != 200 {
        assert!(started.elapsed() < Duration::from_secs(5), "health did not come back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(serve.post(SIGN_IN, &account(9)).await.status, 200);

    // A store that answers with an error of its own: health says so, without it.
    sqlx::query(&format!("DROP TABLE {table}")).execute(&pool).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let r = serve.request("GET", "/healthz", &[], b"").await.unwrap();
    assert_eq!((r.status, r.json()["kind"].as_str()), (503, Some("store-unavailable")), "{}", r.body);
    assert!(!r.body.contains(&table) && !r.body.contains("relation"), "a raw store error: {}", r.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_in_flight_cap() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let (serve, table, config, pool) = start(&url, "reload_cap", "max_in_flight = 1\ndeadline = \"1s\"").await;
    let lock = lock(&pool, &table).await;

    // One attempt waits in the store (until its lock timeout), holding the one slot.
    let addr = serve.addr.clone();
    let first = tokio::spawn(async move {
        crate::common::serve::request(
            &addr,
            "POST",
            SIGN_IN,
            &[("content-type", "application/json")],
            account(1).as_bytes(),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let text = std::fs::read_to_string(&config).unwrap().replace("budget = 100", "budget = 50");
    std::fs::write(&config, text).unwrap();
    serve.signal("HUP");
    let started = Instant::now();
    loop {
        let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
        let limits = r.json()["limits"].as_array().unwrap().clone();
        if limits.iter().any(|l| l["name"] == "sign-in" && l["parts"][0]["budget"] == 50) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(1), "not reloaded in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = serve.post(SIGN_IN, &account(2)).await;
    assert_eq!(r.json()["degraded"], "overloaded", "the call from before the reload lost its slot: {}", r.body);
    assert_eq!(first.await.unwrap().unwrap().json()["degraded"], "timeout");
    lock.rollback().await.unwrap();
}
