//! The Redis store through a real outage, on a server of the test's own: a
//! `CLIENT PAUSE` (every call answered within 2.5 s, counting resumes) and a
//! restart (the same store reconnects by itself).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::redis::{OwnRedis, SECRET};
use limit_store::{update_with, Entry, Guarded, LimitStore, RedisStore, Write};
use serde_json::json;

async fn add_one(store: &dyn LimitStore, key: &str) -> Result<u64, limit_store::StoreError> {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        let expires_at = current[0].as_ref().map_or(now + 600_000, |e| e.expires_at);
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at })], n)
    })
    .await
}

async fn count(store: &dyn LimitStore, key: &str) -> u64 {
    store.read(&[key]).await.unwrap()[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0)
}

/// What one task saw: calls acknowledged and failed, and the slowest answer.
#[derive(Default)]
struct Tally {
    acked: u64,
    failed: u64,
    slowest: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_server_is_answered_within_the_deadline_and_counting_resumes() {
    let Some(own) = OwnRedis::start(&[]) else { return };
    let store: Arc<dyn LimitStore> =
        Arc::new(Guarded::new(Arc::new(RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap())));
    let until = Instant::now() + Duration::from_secs(6);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("outage-{t}");
            let mut tally = Tally::default();
            while Instant::now() < until {
                let began = Instant::now();
                match add_one(&*store, &key).await {
                    Ok(_) => tally.acked += 1,
                    Err(e) => {
                        assert!(e.is_unavailable(), "{e}");
                        tally.failed += 1;
                    }
                }
                tally.slowest = tally.slowest.max(began.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            (key, tally)
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(own.cli(&["CLIENT", "PAUSE", "3000", "ALL"]), "OK");
    let mut failed = 0;
    for task in tasks {
        let (key, tally) = task.await.unwrap();
        assert!(tally.slowest <= Duration::from_millis(2_500), "{key}: a call took {:?}", tally.slowest);
        let stored = count(&*store, &key).await;
        assert!(
            (tally.acked..=tally.acked + tally.failed).contains(&stored),
            "{key}: stored {stored}, acknowledged {}, failed {}",
            tally.acked,
            tally.failed
        );
        failed += tally.failed;
    }
    assert!(failed > 0, "the pause was felt");
    // Counting goes on, on the same store.
    assert!(add_one(&*store, "after").await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reconnected_without_a_new_store() {
    let Some(mut own) = OwnRedis::start(&[]) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    assert_eq!(add_one(&store, "k").await.unwrap(), 1);
    own.stop();
    let began = Instant::now();
    let err = add_one(&store, "k").await.unwrap_err();
    assert!(
        err.is_unavailable() && began.elapsed() < Duration::from_millis(2_500),
        "{err} after {:?}",
        began.elapsed()
    );
    own.restart();
    // The server came back empty (it keeps nothing on disk): counting starts
    // again, on the same store object, within a few seconds.
    let began = Instant::now();
    loop {
        match add_one(&store, "k").await {
            Ok(n) => {
                assert_eq!(n, 1);
                break;
            }
            Err(e) => {
                assert!(began.elapsed() < Duration::from_secs(10), "still failing after {:?}: {e}", began.elapsed());
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(add_one(&store, "k").await.unwrap(), 2);
}
