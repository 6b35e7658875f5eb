//! `redis+cluster://` on a real Redis Cluster (`.ci/redis-topologies
//! cluster`: three primaries, a replica each): the contract suite with two
//! handles, bare and guarded; three processes racing updates whose two keys
//! lie in different hash slots (of two primaries, and of one), exact to the
//! budget with both keys agreeing; and `limit-store contract` on a cluster URL.
//!
//! The cluster is `LIMIT_STORE_TEST_REDIS_CLUSTER` (`.ci/run` starts one);
//! without it the tests start one on ports 27100–27105 from the machine's
//! `redis-server`, and leave it running for the next run. They are skipped,
//! saying so, only when no cluster can be started.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};

use crate::common::redis::trips;
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
        let (one, two, more) = trips(&store).await;
        // The keys lie in two slots of two primaries: every granted update
        // took the protocol's steps (prewrites and commit, after a read
        // unless on a guess), and a refused one (it writes nothing) two
        // agreeing reads. Of one primary: one compare-and-set there, after a
        // read unless on a guess.
        if std::env::var("LST_CLUSTER_ONE_NODE").is_err() {
            assert!(one == 0 && two + more >= sum.0, "{:?}", (one, two, more));
        }
        sum
    });
    println!("granted {granted} unavailable {unavailable}");
}

/// The address of the primary that serves each slot now (`None`: none
/// known), from `CLUSTER NODES` on the cluster URL's first node, and the
/// slot of a store's keys named for a name, from `CLUSTER KEYSLOT` there.
struct Slots {
    primaries: Vec<Option<String>>,
    seed: redis::Connection,
    secret: crate::common::redis::Secret,
}

impl Slots {
    fn new(url: &str) -> Slots {
        let seed = url.trim_start_matches("redis+cluster://").split(',').next().unwrap();
        let mut seed = redis::Client::open(format!("redis://{seed}")).unwrap().get_connection().unwrap();
        let text: String = redis::cmd("CLUSTER").arg("NODES").query(&mut seed).unwrap();
        let mut primaries = vec![None; 16_384];
        for line in text.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if !fields[2].contains("master") || fields[2].contains("fail") {
                continue;
            }
            let address = fields[1].split('@').next().unwrap();
            for range in fields[8..].iter().filter(|r| !r.starts_with('[')) {
                let (from, to) = range.split_once('-').unwrap_or((range, range));
                for slot in &mut primaries[from.parse::<usize>().unwrap()..=to.parse::<usize>().unwrap()] {
                    *slot = Some(address.to_owned());
                }
            }
        }
        Slots { primaries, seed, secret: crate::common::redis::Secret::new(SECRET).unwrap() }
    }

    fn slot(&mut self, name: &str) -> usize {
        let tag = crate::common::redis::tag_of(&self.secret, name);
        redis::cmd("CLUSTER").arg("KEYSLOT").arg(tag).query(&mut self.seed).unwrap()
    }
}

/// An account's key and an address's key of this run, in two slots: of one
/// primary (`one_node`), or of two.
fn two_slots(url: &str, run: &str, one_node: bool) -> [String; 2] {
    let mut slots = Slots::new(url);
    let account = format!("sign-in:account-{run}");
    let first = slots.slot(&account);
    let ip = (0..)
        .map(|i| format!("sign-in:ip-{run}-{i}"))
        .find(|ip| {
            let slot = slots.slot(ip);
            let (node, primary) = (&slots.primaries[slot], &slots.primaries[first]);
            slot != first && node.is_some() && (node == primary) == one_node
        })
        .unwrap();
    [account, ip]
}

/// Three processes, four tasks each, race updates of an account key and an
/// address key (in two hash slots) on a budget of 37: exactly 37 are
/// granted, and both keys hold 37. The two slots lie on two primaries (the
/// cross-slot steps), then on one (one compare-and-set on that node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_count_two_slots_exactly() {
    let Some(url) = cluster() else { return };
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let run = format!("{:x}-{}", since.as_nanos(), std::process::id());
    for one_node in [false, true] {
        let keys = two_slots(&url, &format!("{run}-{one_node}"), one_node);
        race(&url, &keys, one_node).await;
    }
}

/// Three processes race on `keys` (see above).
async fn race(url: &str, keys: &[String; 2], one_node: bool) {
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..WORKERS)
        .map(|_| {
            let mut worker = Command::new(&exe);
            worker
                .args(["--exact", "cluster::worker", "--nocapture", "--test-threads=1"])
                .env("LST_CLUSTER_URL", url)
                .env("LST_CLUSTER_KEYS", keys.join(" "));
            if one_node {
                worker.env("LST_CLUSTER_ONE_NODE", "1");
            }
            worker.stdout(Stdio::piped()).spawn().expect("start a worker process")
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
    assert_eq!(unavailable, 0, "every update was answered (one node: {one_node})");
    assert_eq!(granted, BUDGET, "granted {granted} on a budget of {BUDGET} (one node: {one_node})");
    let store = RedisStore::builder(url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let held = store.read(&[&keys[0], &keys[1]]).await.unwrap();
    for entry in held {
        assert_eq!(entry.expect("the key holds the count").value, json!({ "n": BUDGET }), "both keys agree");
    }
}

/// Two keys in two slots of one primary are counted in one compare-and-set
/// there: one round trip when the store's guess holds. Two keys of two
/// primaries take the cross-slot steps: two round trips at least.
#[tokio::test(flavor = "current_thread")]
async fn two_slots_of_one_primary_count_in_one_round_trip() {
    let Some(url) = cluster() else { return };
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let run = format!("one-trip-{:x}-{}", since.as_nanos(), std::process::id());
    let store = RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let together = two_slots(&url, &format!("{run}-one"), true);
    let count = |keys: &[String; 2]| {
        let store = &store;
        let keys = keys.clone();
        async move { crate::common::redis::attempt_both(store, [&keys[0], &keys[1]], 1_000).await.unwrap() }
    };
    // Until the store has the slots' map (asked for at its first write),
    // such a count takes the cross-slot steps.
    let (mut counted, started) = (0, std::time::Instant::now());
    while trips(&store).await.0 == 0 {
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", trips(&store).await);
        assert!(count(&together).await);
        counted += 1;
    }
    let before = trips(&store).await;
    for _ in 0..10 {
        assert!(count(&together).await);
    }
    let after = trips(&store).await;
    assert_eq!((after.0 - before.0, after.1, after.2), (10, before.1, before.2), "{after:?}");
    let apart = two_slots(&url, &format!("{run}-two"), false);
    for _ in 0..10 {
        assert!(count(&apart).await);
    }
    let last = trips(&store).await;
    assert_eq!(last.0, after.0, "{last:?}");
    assert_eq!(last.1 + last.2 - after.1 - after.2, 10, "{last:?}");
    for (keys, n) in [(&together, counted + 10), (&apart, 10)] {
        let held = store.read(&[&keys[0], &keys[1]]).await.unwrap();
        for entry in held {
            assert_eq!(entry.expect("the key holds the count").value, json!({ "n": n }), "both keys agree");
        }
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
