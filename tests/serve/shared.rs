//! Three `serve` processes on one database share one budget: 150 concurrent
//! sign-in attempts for one account, spread over the three, are answered
//! exactly 5 times 200 and 145 times 429; a reset through one lets the next
//! attempt through another. On PostgreSQL, on one SQLite file, and on Redis.

use std::path::PathBuf;

use crate::common::db::{rand_suffix, server, sqlite_url, SECRET};
use crate::common::serve::{post_at_once, settings_file, Serve};
use limit_store::DatabaseStore;

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";
const BODY: &str = r#"{"keys": {"account": "shared@example.com", "ip": "198.51.100.7"}}"#;

/// Migrates `table` on `url` and writes a settings file that names them.
async fn settings(url: &str, table: &str) -> PathBuf {
    DatabaseStore::builder(url).table(table).migrate().await.unwrap();
    settings_file(&format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"\n"))
}

async fn three_instances_share_one_budget(url: &str) {
    let table = format!("ls_serve_{}", rand_suffix() % 1_000_000_000);
    let config = settings(url, &table).await;
    three_instances_share_one_budget_with(url, config, SECRET).await;
}

async fn three_instances_share_one_budget_with(url: &str, config: PathBuf, secret: &str) {
    let instances = Serve::start_many(3, &config, &[("LIMIT_STORE_SECRET", secret)]).await;
    let statuses = post_at_once(&instances, SIGN_IN, (0..150).map(|_| BODY.to_owned())).await;
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((allowed, limited), (5, 145), "{url}: {statuses:?}");

    let reset = instances[0].post("/v1/limits/sign-in/reset", r#"{"keys": {"account": "shared@example.com"}}"#).await;
    assert_eq!(reset.status, 204, "{}", reset.body);
    let next = instances[2].post(SIGN_IN, BODY).await;
    assert_eq!(next.status, 200, "{url}: after a reset through another instance: {}", next.body);
    drop(instances);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_postgres_share_one_budget() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    three_instances_share_one_budget(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_sqlite_file_share_one_budget() {
    three_instances_share_one_budget(&sqlite_url("serve")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_redis_share_one_budget() {
    let Some(url) = server("LIMIT_STORE_TEST_REDIS") else { return };
    let path = settings_file(&format!("[rate_limit]\nstore = \"redis\"\nredis_url = \"{url}\"\n"));
    // A secret of this run's own: its keys are new on a server that keeps
    // earlier runs' counts.
    let secret = format!("{SECRET} {}", rand_suffix());
    three_instances_share_one_budget_with(&url, path, &secret).await;
}
