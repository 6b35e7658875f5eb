//! `serve` with its database unreachable (a relay that stops relaying): each
//! limit's policy answers within 2.5 s, sign-in 503 (deny), api 200 with
//! `degraded` (allow), and health says the store does not answer.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, server, SECRET};
use crate::common::relay::Relay;
use crate::common::serve::Serve;
use limit_store::DatabaseStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_answered_by_each_limits_policy_in_time() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let host_port = url.split('@').nth(1).and_then(|rest| rest.split('/').next()).unwrap().to_owned();
    let relay = Relay::to(host_port.clone()).await;
    let relayed = url.replacen(&host_port, &format!("127.0.0.1:{}", relay.port), 1);
    let table = format!("ls_serve_outage_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    let config = std::env::temp_dir().join(format!("limit-store-{table}.toml"));
    std::fs::write(
        &config,
        format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{relayed}\"\ntable = \"{table}\"\n"),
    )
    .unwrap();
    let serve = Serve::start(Some(&config), &[("LIMIT_STORE_SECRET", SECRET)], &[]).await;
    let sign_in = r#"{"keys": {"account": "down@example.com", "ip": "192.0.2.9"}}"#;
    assert_eq!(serve.post("/v1/limits/sign-in/attempt", sign_in).await.status, 200, "counting before the outage");

    relay.paused.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let r = serve.post("/v1/limits/sign-in/attempt", sign_in).await;
    assert!(started.elapsed() < Duration::from_millis(2_500), "sign-in answered in {:?}", started.elapsed());
    assert_eq!(r.status, 503, "{}", r.body);
    assert_eq!(r.json()["kind"], "store-unavailable");
    assert!(r.json()["degraded"].is_string(), "{}", r.body);

    let started = Instant::now();
    let r = serve.post("/v1/limits/api/attempt", r#"{"keys": {"client": "key-1"}}"#).await;
    assert!(started.elapsed() < Duration::from_millis(2_500), "api answered in {:?}", started.elapsed());
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["degraded"].is_string() && r.json()["allowed"] == true, "{}", r.body);

    let r = serve.request("GET", "/healthz", &[], b"").await.unwrap();
    assert_eq!(r.status, 503, "{}", r.body);
    relay.paused.store(false, Ordering::SeqCst);
    let _ = std::fs::remove_file(config);
}
