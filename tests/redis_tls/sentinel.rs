//! `rediss+sentinel://` on a topology of the test's own that speaks TLS
//! only: a primary, its replica (replicating over TLS) and a Sentinel. The
//! store counts on the primary the Sentinel names, and after a `SENTINEL
//! FAILOVER` on the replica it promoted; the plain `redis+sentinel://` is
//! refused on the Sentinel's port.

use std::time::{Duration, Instant};

use crate::common::redis::SECRET;
use crate::setup::{certs, chain, free_ports, Procs};
use limit_store::{update_with, Entry, LimitStore, RedisStore, Write};
use serde_json::json;

const NAME: &str = "limit-store-tls";

/// A primary, a replica and a Sentinel, TLS only, stopped when dropped.
struct TlsSentinel {
    procs: Procs,
    primary: u16,
    replica: u16,
    sentinel: u16,
}

impl TlsSentinel {
    fn start() -> Option<TlsSentinel> {
        let mut procs = Procs::new(certs()?, "sentinel");
        let [primary, replica, sentinel] = free_ports(3, false)[..] else { unreachable!() };
        // Replicas sync at once, not after the default 5 s of waiting for more.
        procs.server(primary, &["--repl-diskless-sync-delay", "0"]);
        procs.server(replica, &["--replicaof", "127.0.0.1", &primary.to_string()]);
        procs.sentinel(sentinel, NAME, primary);
        let topology = TlsSentinel { procs, primary, replica, sentinel };
        // Ready when the replica has synced and the Sentinel knows it.
        topology.procs.wait(15, "the replica synced and known", || {
            topology.procs.on(replica, &["INFO", "replication"]).contains("master_link_status:up")
                && topology.procs.on(sentinel, &["SENTINEL", "replicas", NAME]).contains(&replica.to_string())
        });
        Some(topology)
    }

    fn url(&self, scheme: &str) -> String {
        format!("{scheme}://127.0.0.1:{}/{NAME}", self.sentinel)
    }

    /// The primary's port, as the Sentinel names it.
    fn named(&self) -> String {
        let named = self.procs.on(self.sentinel, &["SENTINEL", "get-master-addr-by-name", NAME]);
        named.lines().last().unwrap_or_default().to_owned()
    }

    /// The first word of `ROLE` on `port`: `master` or `slave`.
    fn role(&self, port: u16) -> String {
        self.procs.on(port, &["ROLE"]).lines().next().unwrap_or_default().to_owned()
    }
}

/// Adds one to the count under `key`; the count after.
async fn add_one(store: &dyn LimitStore, key: &str) -> Result<u64, limit_store::StoreError> {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + 600_000 })], n)
    })
    .await
}

#[tokio::test]
async fn rediss_sentinel_urls_count_on_the_named_primary_over_tls() {
    let Some(topology) = TlsSentinel::start() else { return };
    assert_eq!(topology.named(), topology.primary.to_string());
    let store = RedisStore::builder(&topology.url("rediss+sentinel")).secret(SECRET).connect().await.unwrap();
    for want in 1..=5 {
        assert_eq!(add_one(&store, "before").await.map_err(|e| chain(&e)), Ok(want));
    }
    assert_eq!(store.read(&["before"]).await.unwrap()[0].as_ref().unwrap().value, json!({"n": 5}));
    // On the primary: the one server that takes writes holds them.
    let prefix = store.info().await.unwrap().key_prefix;
    let on_primary = topology.procs.on(topology.primary, &["--scan", "--pattern", &format!("{prefix}*")]);
    assert!(!on_primary.is_empty(), "the primary on {} holds no key of the store", topology.primary);
    assert_eq!(topology.role(topology.primary), "master");

    // A failover: the store follows the Sentinel to the promoted replica,
    // reached over TLS as the old primary was.
    assert_eq!(topology.procs.on(topology.sentinel, &["SENTINEL", "FAILOVER", NAME]), "OK");
    let began = Instant::now();
    while topology.named() != topology.replica.to_string() {
        assert!(began.elapsed() < Duration::from_secs(10), "the Sentinel never failed over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The old primary made a replica of the new one, as the Sentinel does
    // some 10 s later when it sees the old one again: now no write lands there.
    let replica_of = ["REPLICAOF", "127.0.0.1", &topology.replica.to_string()];
    assert_eq!(topology.procs.on(topology.primary, &replica_of), "OK");
    assert_eq!(topology.role(topology.primary), "slave");
    // The old primary is a replica now: an update that succeeds went to the new one.
    let began = Instant::now();
    while let Err(e) = add_one(&store, "moving").await {
        assert!(began.elapsed() < Duration::from_secs(5), "counting never resumed: {}", chain(&e));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for want in 1..=3 {
        assert_eq!(add_one(&store, "after").await.map_err(|e| chain(&e)), Ok(want));
    }
    assert_eq!(store.read(&["after"]).await.unwrap()[0].as_ref().unwrap().value, json!({"n": 3}));

    // Plain text to the Sentinel's TLS-only port is refused, not quietly spoken.
    let plain = RedisStore::builder(&topology.url("redis+sentinel")).secret(SECRET).connect().await.unwrap_err();
    assert!(matches!(plain, limit_store::StoreError::Setup { .. }), "{}", chain(&plain));
}
