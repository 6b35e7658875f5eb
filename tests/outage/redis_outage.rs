//! The Redis store through a real outage, on a server of the test's own: a
//! 5 s `CLIENT PAUSE` under load (every call answered within 2.5 s, counting
//! resumes on the same store, no acknowledged count lost) and a restart (the
//! same store reconnects by itself).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::load::{add_one, check_after_outage, Load};
use crate::common::redis::{OwnRedis, SECRET};
use limit_store::{Guarded, LimitStore, RedisStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_server_is_answered_within_the_deadline_and_counting_resumes() {
    let _alone = crate::alone().await;
    let Some(own) = OwnRedis::start(&[]) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    let store = Arc::new(Guarded::new(Arc::new(store) as Arc<dyn LimitStore>));
    let load = Load::start(store.clone(), "outage");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(own.cli(&["CLIENT", "PAUSE", "5000", "ALL"]), "OK");
    tokio::time::sleep(Duration::from_secs(5)).await;
    load.server_is_back();
    let tallies = load.finish().await;
    check_after_outage(&store, &tallies).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reconnected_without_a_new_store() {
    let _alone = crate::alone().await;
    let Some(mut own) = OwnRedis::start(&[]) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    assert_eq!(add_one(&store, "k").await.unwrap(), 1);
    own.stop();
    let began = Instant::now();
    let err = add_one(&store, "k").await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Unavailable { .. }) && began.elapsed() < Duration::from_millis(2_500),
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
