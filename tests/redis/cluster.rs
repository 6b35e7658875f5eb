//! `redis+cluster://` on a real Redis Cluster (`.ci/redis-topologies
//! cluster`: three primaries, a replica each): the contract suite with two
//! handles, bare and guarded; three processes racing updates whose two keys
//! lie in different hash slots, exact to the budget with both keys agreeing;
//! and `limit-store contract` on a cluster URL.
//!
//! The cluster is `LIMIT_STORE_TEST_REDIS_CLUSTER` (`.ci/run` starts one);
//! without it the tests start one on ports 27100–27105 from the machine's
//! `redis-server`, and leave it running for the next run. They are skipped,
//! saying so, only when no cluster can be started.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use limit_store::testing::StorePair;
use limit_store::{Guarded, LimitStore, RedisStore};
use serde_json::json;

const SECRET: &str = "limit-store redis cluster tests: a secret of 32+ bytes";
const BUDGET: u64 = 37;
const WORKERS: usize = 3;

/// The cluster's URL, started if need be; `None` (said) if none can start.
fn cluster() -> Option<String> {
    static URL: OnceLock<Option<String>> = OnceLock::new();
    URL.get_or_init(|| {
        if let Some(url) = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER").ok().filter(|u| !u.is_empty()) {
            return Some(url);
        }
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/redis-topologies");
        let dir = std::env::temp_dir().join("limit-store-test-cluster");
        let out = Command::new(script).args(["cluster", dir.to_str().unwrap(), "27100"]).output();
        match out {
            Ok(out) if out.status.success() => Some(String::from_utf8(out.stdout).unwrap().trim().to_owned()),
            Ok(out) => {
                eprintln!("skipped: the Redis Cluster did not start: {}", String::from_utf8_lossy(&out.stderr));
                None
            }
            Err(e) => {
                eprintln!("skipped: .ci/redis-topologies could not run: {e}");
                None
            }
        }
    })
    .clone()
}

/// Two stores on the cluster under a prefix of their own.
async fn pair() -> Option<StorePair> {
    use std::hash::{BuildHasher, Hasher};
    let url = cluster()?;
    let prefix = format!("lscc-{:x}", std::collections::hash_map::RandomState::new().build_hasher().finish());
    let open = || async { RedisStore::builder(&url).secret(SECRET).prefix(&prefix).sweep_every(None).connect().await };
    Some(StorePair { first: Arc::new(open().await.unwrap()), second: Arc::new(open().await.unwrap()) })
}

mod bare {
    use super::*;
    async fn factory() -> Option<StorePair> {
        pair().await
    }
    limit_store::contract_tests!(factory);
}

mod guarded {
    use super::*;
    async fn factory() -> Option<StorePair> {
        let pair = pair().await?;
        Some(StorePair { first: Arc::new(Guarded::new(pair.first)), second: Arc::new(Guarded::new(pair.second)) })
    }
    limit_store::contract_tests!(factory);
}

/// Counts one attempt on both keys if both are under the budget.
async fn attempt(store: &dyn LimitStore, keys: [&str; 2]) -> Result<bool, limit_store::StoreError> {
    crate::common::redis::attempt_both(store, keys, BUDGET).await
}

/// One of the racing processes (run by the test below, not on its own).
#[test]
fn worker() {
    let (Ok(url), Ok(keys)) = (std::env::var("LST_CLUSTER_URL"), std::env::var("LST_CLUSTER_KEYS")) else { return };
    let (account, ip) = keys.split_once(' ').unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (granted, unavailable) = runtime.block_on(async {
        let store = Arc::new(RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap());
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (store, account, ip) = (store.clone(), account.to_owned(), ip.to_owned());
                tokio::spawn(async move {
                    let (mut granted, mut unavailable) = (0u64, 0u64);
                    for _ in 0..20 {
                        match attempt(&*store, [&account, &ip]).await {
                            Ok(true) => granted += 1,
                            Ok(false) => {}
                            Err(e) => {
                                eprintln!("unavailable: {e}");
                                unavailable += 1;
                            }
                        }
                    }
                    (granted, unavailable)
                })
            })
            .collect();
        let mut sum = (0, 0);
        for task in tasks {
            let (g, u) = task.await.unwrap();
            sum = (sum.0 + g, sum.1 + u);
        }
        let trips = store.info().round_trips;
        // The keys lie in two slots: every granted update took the protocol's
        // steps (prewrites and commit, after a read unless on a guess), and a
        // refused one (it writes nothing) two agreeing reads.
        assert!(trips.one == 0 && trips.two + trips.more >= sum.0, "{trips:?}");
        sum
    });
    println!("granted {granted} unavailable {unavailable}");
}

/// Three processes, four tasks each, race updates of an account key and an
/// address key (in two hash slots) on a budget of 37: exactly 37 are
/// granted, and both keys hold 37.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_count_two_slots_exactly() {
    let Some(url) = cluster() else { return };
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let run = format!("{:x}-{}", since.as_nanos(), std::process::id());
    let keys = [format!("sign-in:account-{run}"), format!("sign-in:ip-{run}")];
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "cluster::worker", "--nocapture", "--test-threads=1"])
                .env("LST_CLUSTER_URL", &url)
                .env("LST_CLUSTER_KEYS", keys.join(" "))
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a worker process")
        })
        .collect();
    let (mut granted, mut unavailable) = (0, 0);
    for child in children {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "a worker failed: {text}");
        let line = text.lines().find_map(|l| l.split("granted ").nth(1)).expect("the worker's report");
        let numbers: Vec<u64> = line.split(" unavailable ").map(|n| n.trim().parse().unwrap()).collect();
        granted += numbers[0];
        unavailable += numbers[1];
    }
    assert_eq!(unavailable, 0, "every update was answered");
    assert_eq!(granted, BUDGET, "granted {granted} on a budget of {BUDGET}");
    let store = RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let held = store.read(&[&keys[0], &keys[1]]).await.unwrap();
    for entry in held {
        assert_eq!(entry.expect("the key holds the count").value, json!({ "n": BUDGET }), "both keys agree");
    }
}

/// `limit-store contract` on the cluster's URL: every case passes.
#[tokio::test(flavor = "current_thread")]
async fn the_contract_command_runs_on_a_cluster_url() {
    let Some(url) = cluster() else { return };
    let out = Command::new(env!("CARGO_BIN_EXE_limit-store")).args(["contract", &url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("FAIL"), "{text}");
}

/// A cluster node named by a plain `redis://` URL is refused, saying what
/// to use; a malformed cluster URL says its form.
#[tokio::test(flavor = "current_thread")]
async fn a_node_through_redis_url_is_refused_with_what_to_use() {
    let Some(url) = cluster() else { return };
    let node = url.replace("redis+cluster://", "redis://");
    let node = node.split(',').next().unwrap();
    let err = RedisStore::builder(node).secret(SECRET).connect().await.unwrap_err().to_string();
    assert!(err.contains("redis+cluster://"), "{err}");
    let err = RedisStore::builder("redis+cluster://").secret(SECRET).connect().await.unwrap_err().to_string();
    assert!(err.contains("redis+cluster://"), "{err}");
}

/// Three `serve` processes with `store = "redis"` on the cluster's URL share
/// one budget: 150 concurrent sign-in attempts (an account and an address:
/// two keys, in two slots) are answered exactly 5 times 200, 145 times 429.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_serve_instances_on_a_cluster_share_one_budget() {
    let Some(url) = cluster() else { return };
    let suffix = crate::common::db::rand_suffix();
    let path = std::env::temp_dir().join(format!("limit-store-serve-cluster-{suffix}.toml"));
    std::fs::write(&path, format!("[rate_limit]\nstore = \"redis\"\nredis_url = \"{url}\"\n")).unwrap();
    // A secret of this run's own: its keys are new on a cluster that keeps
    // earlier runs' counts.
    let secret = format!("{SECRET} {suffix}");
    let env = [("LIMIT_STORE_SECRET", secret.as_str())];
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(crate::common::serve::Serve::start(Some(&path), &env, &[]).await);
    }
    let body = r#"{"keys": {"account": "shared@example.com", "ip": "198.51.100.7"}}"#;
    let attempts: Vec<_> = (0..150)
        .map(|i| {
            let addr = instances[i % 3].addr.clone();
            tokio::spawn(async move {
                let json = [("content-type", "application/json")];
                let path = "/v1/limits/sign-in/attempt";
                crate::common::serve::request(&addr, "POST", path, &json, body.as_bytes()).await.unwrap().status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for attempt in attempts {
        statuses.push(attempt.await.unwrap());
    }
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((allowed, limited), (5, 145), "{statuses:?}");
    drop(instances);
    let _ = std::fs::remove_file(path);
}
