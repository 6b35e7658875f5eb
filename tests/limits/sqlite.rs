//! Every preset on the database store, on SQLite files of their own: the same
//! budgets as on memory, exact under concurrency, on the database's clock.

use std::sync::Arc;

use crate::presets::*;
use limit_store::{DatabaseStore, Limits};

async fn store(name: &str) -> Arc<DatabaseStore> {
    let url = crate::common::db::sqlite_url(name);
    DatabaseStore::builder(&url).migrate().await.expect("migrate");
    Arc::new(
        DatabaseStore::builder(&url)
            .secret(crate::common::db::SECRET)
            .sweep_every(None)
            .connect()
            .await
            .expect("connect"),
    )
}

async fn limits(name: &str) -> Limits {
    Limits::builder()
        .store(store(name).await)
        .budget("api", "client", 5)
        .window("api", "client", 60 * MINUTE)
        .build()
        .expect("build")
}

#[tokio::test]
async fn sign_in_per_account() {
    sign_in_account(&limits("limits-sign-in").await).await;
}

#[tokio::test]
async fn sign_in_per_ip() {
    sign_in_ip(&limits("limits-sign-in-ip").await).await;
}

#[tokio::test]
async fn password_reset_budgets() {
    password_reset(&limits("limits-password-reset").await).await;
}

#[tokio::test]
async fn code_sent_cooldown_holds() {
    code_sent_cooldown(&limits("limits-code-sent").await).await;
}

#[tokio::test]
async fn code_verify_guesses() {
    code_verify(&limits("limits-code-verify").await).await;
}

#[tokio::test]
async fn api_budget() {
    api_small_budget(&limits("limits-api").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_exact_with_many_tasks_on_one_account() {
    // Fewer tasks than the guard's 64 in flight, so none is answered overloaded.
    sign_in_exact_under_concurrency(&limits("limits-concurrent").await, 40).await;
}

#[tokio::test]
async fn the_database_store_is_shared_so_no_warning() {
    let logs = crate::common::capture_logs();
    let _ = limits("limits-shared").await;
    assert!(logs.lines_of_kind("limit-store-not-shared").is_empty());
}
