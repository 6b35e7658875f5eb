//! A limit of the site's own is exact across three `serve` processes on one
//! store: concurrent attempts spread over the three are allowed exactly as
//! its parts' budgets say (a value's override, and a lockout), on one SQLite
//! file and on PostgreSQL.

use crate::common::db::{rand_suffix, server, sqlite_url, SECRET};
use crate::common::serve::{post_at_once, settings_file, Serve};
use limit_store::DatabaseStore;

const UPLOADS: &str = "/v1/limits/uploads/attempt";

/// `attempts` concurrent attempts with the bodies `body(i)`, spread over
/// `instances`: how many were allowed and how many limited.
async fn spread(instances: &[Serve], attempts: usize, body: impl Fn(usize) -> String) -> (usize, usize) {
    let statuses = post_at_once(instances, UPLOADS, (0..attempts).map(body)).await;
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(allowed + statuses.iter().filter(|&&s| s == 429).count(), attempts, "{statuses:?}");
    (allowed, attempts - allowed)
}

async fn three_instances_count_a_limit_of_the_sites_own_exactly(url: &str) {
    let table = format!("ls_site_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(url).table(&table).migrate().await.unwrap();
    let config = settings_file(&format!(
        "[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"\n\n\
         [rate_limit.limits.uploads]\nparts = [\"user\", \"ip\"]\nbudget = 3\nwindow = \"1h\"\n\n\
         [rate_limit.limits.uploads.ip]\nalgorithm = \"lockout\"\nbudget = 5\nlock = \"1h\"\nnormalize = \"ip\"\n\n\
         [rate_limit.limits.uploads.user.overrides]\n\"big-co\" = {{ budget = 7 }}\n"
    ));
    let instances = Serve::start_many(3, &config, &[("LIMIT_STORE_SECRET", SECRET)]).await;
    let body = |user: &str, ip: String| format!(r#"{{"keys": {{"user": "{user}", "ip": "{ip}"}}}}"#);

    // One user over many addresses: the user's budget answers.
    let (allowed, _) = spread(&instances, 60, |i| body("ann", format!("192.0.2.{i}"))).await;
    assert_eq!(allowed, 3, "{url}: ann");
    // An overridden value: its own budget.
    let (allowed, _) = spread(&instances, 60, |i| body("big-co", format!("198.51.100.{i}"))).await;
    assert_eq!(allowed, 7, "{url}: big-co");
    // Many users from one address: the lockout's budget, then locked.
    let (allowed, _) = spread(&instances, 60, |i| body(&format!("user-{i}"), "203.0.113.5".into())).await;
    assert_eq!(allowed, 5, "{url}: one address");
    let r = instances[1].post(UPLOADS, &body("fresh", "203.0.113.5".into())).await;
    assert_eq!((r.status, r.json()["limited_by"].as_str()), (429, Some("ip")), "{url}: {}", r.body);
    drop(instances);
    let _ = std::fs::remove_file(config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_one_sqlite_file_count_a_limit_of_the_sites_own_exactly() {
    three_instances_count_a_limit_of_the_sites_own_exactly(&sqlite_url("site-limits")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_instances_on_postgres_count_a_limit_of_the_sites_own_exactly() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    three_instances_count_a_limit_of_the_sites_own_exactly(&url).await;
}
