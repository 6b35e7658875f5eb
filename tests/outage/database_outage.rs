//! A database that stops answering (a network that drops every packet, a
//! server that hangs): every call is answered unavailable within the guard's
//! deadline, the in-flight places come back (the pool's check of a connection
//! times out, and a call stuck mid-query is dropped after `CALL_LIMIT`)
//! without waiting for the operating system to give up, and counting resumes
//! when the database answers again.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::db::{server, SECRET};
use crate::common::relay::Relay;
use limit_store::error::Unavailable;
use limit_store::{DatabaseStore, Entry, Guarded, LimitStore, Millis, Write};
use serde_json::json;

async fn count(store: &dyn LimitStore, key: &str) -> Result<(), limit_store::StoreError> {
    store
        .update(&[key], &mut |cur: &[Option<Entry>], now: Millis| {
            let n = cur[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
            vec![Write::Put(Entry { value: json!(n), expires_at: now + 60_000 })]
        })
        .await
}

async fn outage(url: &str, host_port: &str) {
    let table = "limit_store_outage";
    DatabaseStore::builder(url).table(table).migrate().await.unwrap();
    let relay = Relay::to(host_port.to_owned()).await;
    let relayed = url.replacen(host_port, &format!("127.0.0.1:{}", relay.port), 1);
    let store = DatabaseStore::builder(&relayed).table(table).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let guard = Guarded::new(Arc::new(store) as Arc<dyn LimitStore>);
    let key = format!("outage:{}", crate::common::db::rand_suffix());
    count(&guard, &key).await.expect("counts while the database answers");

    relay.paused.store(true, Ordering::SeqCst);
    for _ in 0..3 {
        let started = Instant::now();
        let err = count(&guard, &key).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, limit_store::StoreError::Unavailable { .. }), "{url}: {err}");
        assert!(
            matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Timeout, .. }),
            "{url}: {err}"
        );
        assert!(took < Duration::from_millis(2_500), "{url}: answered after {took:?}");
    }
    // The store drops calls the database never answers, and the places come back.
    let started = Instant::now();
    while guard.in_flight() > 0 {
        assert!(started.elapsed() < Duration::from_secs(10), "{url}: {} calls still in flight", guard.in_flight());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    relay.paused.store(false, Ordering::SeqCst);
    let mut recovered = false;
    for _ in 0..20 {
        if count(&guard, &key).await.is_ok() {
            recovered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(recovered, "{url}: counts again once the database answers");
}

/// `host:port` of a URL like `scheme://user@host:port/db`.
fn host_port(url: &str) -> String {
    let after_at = url.rsplit_once('@').map_or(url, |(_, rest)| rest);
    let after_scheme = after_at.split_once("://").map_or(after_at, |(_, rest)| rest);
    after_scheme.split('/').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_that_stops_answering_is_unavailable_within_the_deadline() {
    let _alone = crate::alone().await;
    if let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") {
        outage(&url, &host_port(&url)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_that_stops_answering_is_unavailable_within_the_deadline() {
    let _alone = crate::alone().await;
    if let Some(url) = server("LIMIT_STORE_TEST_MYSQL") {
        outage(&url, &host_port(&url)).await;
    }
}
