//! A Redis server that became a replica (as the old primary does after a
//! failover, made so here with `REPLICAOF` on servers of the test's own):
//! every count is answered unavailable, saying the server is a replica and
//! that `redis+sentinel://` follows failovers, and an error with its own
//! `kind` is logged at most once a minute.

use std::time::{Duration, Instant};

use crate::common::load::add_one;
use crate::common::redis::{OwnRedis, SECRET};
use limit_store::log::Kind;
use limit_store::{LimitStore, RedisStore};

fn port(own: &OwnRedis) -> String {
    own.url().rsplit(':').next().unwrap().to_owned()
}

#[tokio::test(flavor = "current_thread")]
async fn a_server_made_a_replica_answers_unavailable_and_says_why_once_a_minute() {
    // Replication writes a snapshot file: in the temporary directory, not the checkout.
    let tmp = std::env::temp_dir().display().to_string();
    let Some(primary) = OwnRedis::start(&["--dir", &tmp]) else { return };
    let Some(old) = OwnRedis::start(&["--dir", &tmp]) else { return };
    let store = RedisStore::builder(&old.url()).secret(SECRET).connect().await.unwrap();
    assert_eq!(add_one(&store, "held").await.unwrap(), 1);
    let logs = crate::common::capture_logs();

    assert_eq!(old.cli(&["REPLICAOF", "127.0.0.1", &port(&primary)]), "OK");
    let began = Instant::now();
    while !old.cli(&["INFO", "replication"]).contains("master_link_status:up") {
        assert!(began.elapsed() < Duration::from_secs(10), "the replica never synced");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A held key (remembered: one round trip), a new key, and a key read
    // first (two round trips): each is refused by the replica, and says so.
    let _ = store.read(&["read first"]).await.unwrap();
    for key in ["held", "new", "read first", "held", "new"] {
        let err = add_one(&store, key).await.unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, limit_store::StoreError::Unavailable { .. }), "{key}: {err}");
        assert!(text.contains("replica") && text.contains("redis+sentinel://"), "{key}: {text}");
    }
    let lines = logs.lines_of_kind(&Kind::RedisReplica.to_string());
    assert_eq!(lines.len(), 1, "one line a minute: {lines:#?}");
    assert!(lines[0].contains("replica") && lines[0].contains("redis+sentinel://"), "{}", lines[0]);

    // Made a primary again (as a site would, or a failover back): counting
    // resumes on the same store, on the data the primary replicated.
    assert_eq!(old.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
    assert_eq!(add_one(&store, "held").await.unwrap(), 1, "the primary never held this key");
}
