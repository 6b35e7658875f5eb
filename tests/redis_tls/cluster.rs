//! `rediss+cluster://` on a Redis Cluster of the test's own that speaks TLS
//! only, to clients, on its bus and to its replicas: three primaries made
//! by `redis-cli --cluster create`. One-key updates on each primary and
//! two-key updates whose keys lie on two primaries count exactly, and the
//! plain `redis+cluster://` is refused on its ports.

use crate::common::redis::{attempt_both, names_in, Secret, SECRET};
use crate::setup::{certs, chain, free_ports, Procs};
use limit_store::{update_with, Entry, LimitStore, RedisStore, Write};
use serde_json::json;

/// How many times each worker counts.
const ROUNDS: u64 = 10;
/// Workers counting at once.
const WORKERS: u64 = 3;

/// A cluster of three TLS-only primaries, stopped when dropped.
struct TlsCluster {
    procs: Procs,
    ports: Vec<u16>,
}

impl TlsCluster {
    fn start() -> Option<TlsCluster> {
        let mut procs = Procs::new(certs()?, "cluster");
        let ports = free_ports(3, true);
        for &port in &ports {
            let nodes = procs.dir.join(format!("nodes-{port}.conf")).display().to_string();
            #[rustfmt::skip]
            procs.server(port, &[
                "--cluster-enabled", "yes", "--cluster-config-file", &nodes, "--cluster-node-timeout", "2000",
                "--tls-cluster", "yes",
            ]);
        }
        let nodes: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(nodes.iter().map(String::as_str));
        create.push("--cluster-yes");
        let out = procs.cli(&create);
        assert!(out.contains("All 16384 slots covered"), "redis-cli --cluster create: {out}");
        for (&port, slots) in ports.iter().zip(["0-5460", "5461-10922", "10923-16383"]) {
            procs.wait(10, "cluster_state:ok", || procs.on(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"));
            let nodes = procs.on(port, &["CLUSTER", "NODES"]);
            let myself = nodes.lines().find(|l| l.contains("myself")).unwrap_or_default();
            assert!(myself.ends_with(slots), "the node on {port} should serve {slots}: {myself}");
        }
        Some(TlsCluster { procs, ports })
    }

    /// `{scheme}://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    fn url(&self, scheme: &str) -> String {
        let nodes: Vec<String> = self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        format!("{scheme}://{}", nodes.join(","))
    }
}

/// Adds one to the count under `key`; the count after.
async fn add_one(store: &dyn LimitStore, key: &str) -> u64 {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + 600_000 })], n)
    })
    .await
    .unwrap_or_else(|e| panic!("one-key update on {key} refused: {}", chain(&e)))
}

/// The count under `key`, read through the store.
async fn count(store: &dyn LimitStore, key: &str) -> Option<u64> {
    store.read(&[key]).await.unwrap()[0].as_ref().map(|e| e.value["n"].as_u64().unwrap())
}

#[tokio::test]
async fn rediss_cluster_urls_count_exactly_over_tls() {
    let Some(cluster) = TlsCluster::start() else { return };
    let url = cluster.url("rediss+cluster");
    let store = RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap();

    // A key in each primary's slots (redis-cli gives them out in thirds, in
    // order), and a pair of keys on the first and last primaries.
    let secret = Secret::new(SECRET).unwrap();
    let thirds = [0..5461, 5461..10923, 10923..16384];
    let ones: Vec<String> = thirds.iter().map(|slots| names_in(&secret, "one", slots.clone(), 1).remove(0)).collect();
    let pair = [
        names_in(&secret, "a", thirds[0].clone(), 1).remove(0),
        names_in(&secret, "b", thirds[2].clone(), 1).remove(0),
    ];
    assert_eq!(count(&store, &ones[0]).await, None);

    // Workers at once, each counting every one-key and the two-key update.
    let worker = |_| async {
        for _ in 0..ROUNDS {
            for key in &ones {
                add_one(&store, key).await;
            }
            let counted = attempt_both(&store, [&pair[0], &pair[1]], u64::MAX).await;
            let counted = counted.unwrap_or_else(|e| panic!("two-key update refused: {}", chain(&e)));
            assert!(counted, "under its budget, the two-key update counts");
        }
    };
    futures_util::future::join_all((0..WORKERS).map(worker)).await;

    for key in ones.iter().chain(&pair) {
        assert_eq!(count(&store, key).await, Some(WORKERS * ROUNDS), "{key}");
    }
    // Each primary holds some of the keys: the calls went to each over TLS.
    for &port in &cluster.ports {
        let keys: u64 = cluster.procs.on(port, &["DBSIZE"]).parse().unwrap();
        assert!(keys > 0, "the primary on {port} holds no key");
    }
    // A second handle sees the same counts.
    let other = RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    assert_eq!(count(&other, &pair[1]).await, Some(WORKERS * ROUNDS));

    // Plain text to the TLS-only ports is refused, not quietly spoken.
    let plain = RedisStore::builder(&cluster.url("redis+cluster")).secret(SECRET).connect().await.unwrap_err();
    assert!(plain.to_string().contains("Redis Cluster"), "{}", chain(&plain));
}
