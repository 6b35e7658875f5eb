//! Faults on a Redis Cluster of the test's own (`.ci/redis-topologies
//! cluster` on free ports, stopped when the test ends): a process killed
//! with SIGKILL in the middle of two-slot updates leaves no update
//! half-applied and its keys usable again within the lock's lease; and a
//! `CLUSTER FAILOVER` under load with `min_replicas_acked = 1` is answered
//! within the guard's deadline, with counting resumed on the same store and
//! no acknowledged count lost; and so is a primary killed with SIGKILL
//! (its replica promoted by the cluster), which rejoins when restarted;
//! and with `min_replicas_acked`, a write waiting for a stopped replica holds
//! up no other write to its primary.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::load::{add_one, check_after_outage, Load};
use crate::common::redis::Stopped;
use limit_store::{update_with, Entry, Guarded, LimitStore, RedisStore, StoreError, Write};
use serde_json::json;

const SECRET: &str = "limit-store redis cluster tests: a secret of 32+ bytes";

/// A cluster of this test's own, stopped when dropped (also used by
/// `redis_reshard.rs`).
pub(crate) struct Topology {
    pub(crate) dir: PathBuf,
    pub(crate) base: u16,
    pub(crate) url: String,
}

impl Topology {
    pub(crate) fn start() -> Option<Topology> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            eprintln!("skipped: redis-server is not installed");
            return None;
        }
        // Ports found free can be taken before a node binds them (other tests
        // run beside this one): a start that fails is stopped and tried
        // again on other ports, up to three times.
        let mut failed = Vec::new();
        for _ in 0..3 {
            let base = free_ports(6);
            let dir = std::env::temp_dir().join(format!("lst-cluster-{}-{base}", std::process::id()));
            let out =
                Command::new(script()).args(["cluster", dir.to_str().unwrap(), &base.to_string()]).output().unwrap();
            let topology = Topology { dir, base, url: String::from_utf8(out.stdout).unwrap().trim().to_owned() };
            if out.status.success() {
                return Some(topology);
            }
            failed.push(String::from_utf8_lossy(&out.stderr).into_owned());
            drop(topology); // stops what did start
        }
        panic!("the cluster did not start in three tries: {failed:?}");
    }

    pub(crate) fn cli(&self, port: u16, args: &[&str]) -> String {
        let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// A cluster node killed by a test, started again (and rejoined) when
/// dropped, even when the test fails: the cluster is left whole.
struct Killed<'a> {
    topology: &'a Topology,
    port: u16,
}

impl Killed<'_> {
    /// Starts the node again and waits until it has rejoined.
    fn restart(&self) {
        let dir = self.topology.dir.to_str().unwrap();
        let out = Command::new(script()).args(["node", dir, &self.port.to_string()]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

impl Drop for Killed<'_> {
    fn drop(&mut self) {
        if self.topology.cli(self.port, &["PING"]) != "PONG" {
            self.restart();
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["stop", self.dir.to_str().unwrap()]).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/redis-topologies")
}

/// The first of `n` consecutive free ports whose cluster bus ports (each
/// plus 10,000) are free too.
fn free_ports(n: u16) -> u16 {
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let nth = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = 30_000 + u16::try_from(std::process::id() % 500).unwrap() * 20 + nth * 10;
    let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
    // From `start` to 40,000, then from 30,000: a start near the end (a
    // process id near 500's multiple) still finds a range.
    (start..40_000 - n)
        .step_by(usize::from(n))
        .chain((30_000..start).step_by(usize::from(n)))
        .find(|&base| (base..base + n).all(|p| free(p) && free(p + 10_000)))
        .expect("free ports")
}

/// Adds one to both keys in one update; the new counts.
async fn add_both(store: &dyn LimitStore, keys: [&str; 2]) -> Result<(u64, u64), StoreError> {
    update_with(store, &keys, |current, now| {
        let n: Vec<u64> = current.iter().map(|e| e.as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0)).collect();
        let put = |n: u64| Write::Put(Entry { value: json!({ "n": n + 1 }), expires_at: now + 600_000 });
        (vec![put(n[0]), put(n[1])], (n[0] + 1, n[1] + 1))
    })
    .await
}

/// Both keys' counts, read as one snapshot.
async fn counts(store: &dyn LimitStore, keys: [&str; 2]) -> (u64, u64) {
    let held = store.read(&keys).await.unwrap();
    let n = |i: usize| held[i].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
    (n(0), n(1))
}

/// The process that is killed (run by the test below, not on its own):
/// counts both keys from four tasks until it dies.
#[test]
fn doomed() {
    let (Ok(url), Ok(keys)) = (std::env::var("LST_DOOMED_URL"), std::env::var("LST_DOOMED_KEYS")) else { return };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let store = Arc::new(RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap());
        println!("connected");
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let (store, keys) = (store.clone(), keys.clone());
                tokio::spawn(async move {
                    let (a, b) = keys.split_once(' ').unwrap();
                    loop {
                        let _ = add_both(&*store, [a, b]).await;
                    }
                })
            })
            .collect();
        for task in tasks {
            let _ = task.await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_killed_mid_update_leaves_no_update_half_applied() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let store = RedisStore::builder(&topology.url).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..3 {
        let keys = [format!("sign-in:account-{round}"), format!("sign-in:ip-{round}")];
        let keys = [keys[0].as_str(), keys[1].as_str()];
        let mut child = Command::new(&exe)
            .args(["--exact", "redis_cluster::doomed", "--nocapture", "--test-threads=1"])
            .env("LST_DOOMED_URL", &topology.url)
            .env("LST_DOOMED_KEYS", keys.join(" "))
            .stdout(Stdio::null())
            .spawn()
            .expect("start the process to kill");
        // Let it count for a while, then kill it wherever it is.
        let began = Instant::now();
        while counts(&store, keys).await.0 < 20 {
            assert!(began.elapsed() < Duration::from_secs(20), "the process never counted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let killed = Instant::now();
        let (a, b) = counts(&store, keys).await;
        assert_eq!(a, b, "round {round}: a reader sees both keys moved or neither");
        assert_eq!(add_both(&store, keys).await.unwrap(), (a + 1, b + 1), "round {round}: the keys count again");
        let usable = killed.elapsed();
        assert!(usable < Duration::from_millis(2_500), "round {round}: the keys were usable only after {usable:?}");
        eprintln!("round {round}: both keys at {a}, usable again {usable:?} after the kill");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_failover_under_load_is_answered_and_loses_no_acknowledged_count() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    let store = Arc::new(Guarded::new(Arc::new(store) as Arc<dyn LimitStore>));
    let load = Load::start(store.clone(), "cluster");
    // Two-slot updates run beside the one-key load.
    let pairs = {
        let store = store.clone();
        tokio::spawn(async move {
            let (mut acked, mut failed, mut slowest) = (0u64, 0u64, Duration::ZERO);
            let began = Instant::now();
            while began.elapsed() < Duration::from_secs(6) {
                let call = Instant::now();
                match add_both(&*store, ["pair:a", "pair:b"]).await {
                    Ok(_) => acked += 1,
                    Err(_) => failed += 1,
                }
                slowest = slowest.max(call.elapsed());
            }
            (acked, failed, slowest)
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The replica on BASE+3 takes over its primary's slots.
    let replica = topology.base + 3;
    assert_eq!(topology.cli(replica, &["CLUSTER", "FAILOVER"]), "OK");
    let began = Instant::now();
    while !topology.cli(replica, &["ROLE"]).starts_with("master") {
        assert!(began.elapsed() < Duration::from_secs(20), "the replica never took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!("failed over to {replica} in {:?}", began.elapsed());
    load.server_is_back();
    let tallies = load.finish().await;
    let (acked, failed, slowest) = pairs.await.unwrap();
    while store.in_flight() > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for tally in &tallies {
        assert!(tally.slowest <= Duration::from_millis(2_500), "{}: answered after {:?}", tally.key, tally.slowest);
        assert!(tally.acked_after_back > 0, "{}: counting did not resume", tally.key);
        let stored = store.read(&[&tally.key]).await.unwrap()[0].as_ref().and_then(|e| e.value["n"].as_u64());
        let stored = stored.unwrap_or(0);
        assert!((tally.acked..=tally.acked + tally.failed).contains(&stored), "{tally:?}: stored {stored}");
    }
    assert!(slowest <= Duration::from_millis(2_500), "a two-slot update was answered after {slowest:?}");
    let (a, b) = counts(&*store, ["pair:a", "pair:b"]).await;
    assert_eq!(a, b, "both keys of the two-slot updates agree");
    assert!((acked..=acked + failed).contains(&a), "stored {a}, acknowledged {acked}, failed {failed}");
    assert!(add_one(&*store, "after").await.is_ok(), "counting goes on after the failover");
    eprintln!("two-slot updates: {acked} acknowledged, {failed} failed, slowest {slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_load_is_replaced_and_loses_no_acknowledged_count() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    let store = Arc::new(Guarded::new(Arc::new(store) as Arc<dyn LimitStore>));
    // Sixteen keys: some live on every primary.
    let load = Load::start(store.clone(), "killed");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let port = topology.base;
    assert!(topology.cli(port, &["ROLE"]).starts_with("master"));
    let pid = std::fs::read_to_string(topology.dir.join(format!("redis-{port}.pid"))).unwrap();
    let killed = Killed { topology: &topology, port };
    assert!(Command::new("kill").args(["-KILL", pid.trim()]).status().unwrap().success());
    // The cluster promotes the replica after cluster-node-timeout (2 s).
    let began = Instant::now();
    let replica = loop {
        let promoted = (topology.base + 3..topology.base + 6)
            .find(|&p| topology.cli(p, &["ROLE"]).starts_with("master") && cluster_ok(&topology, p));
        if let Some(replica) = promoted {
            break replica;
        }
        assert!(began.elapsed() < Duration::from_secs(30), "no replica took over");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("{replica} took over {:?} after the kill", began.elapsed());
    // With min_replicas_acked = 1 the promoted primary acknowledges nothing
    // until it has a replica again: the killed node, which comes back as one.
    killed.restart();
    assert!(topology.cli(port, &["ROLE"]).starts_with("slave"), "{}", topology.cli(port, &["ROLE"]));
    eprintln!("{port} rejoined as a replica {:?} after the kill", began.elapsed());
    load.server_is_back();
    let tallies = load.finish().await;
    check_after_outage(&store, &tallies).await;
    assert!(add_one(&*store, "after").await.is_ok(), "counting goes on after the node rejoined");
}

/// True when the cluster is whole as the node on `port` sees it.
fn cluster_ok(topology: &Topology, port: u16) -> bool {
    topology.cli(port, &["CLUSTER", "INFO"]).contains("cluster_state:ok")
}

/// The count a key holds, as the store reads it.
async fn count(store: &dyn LimitStore, key: &str) -> u64 {
    let held = store.read(&[key]).await.unwrap();
    held[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0)
}

/// With `min_replicas_acked`, a write waiting for a silent replica (`WAIT`
/// holds its connection until the replicas answer) holds up no other write
/// to the same primary: the waiting writes have connections of their own,
/// so a write to another slot of that primary, sent while the first waits,
/// is run there at once (a read shows it) and waits beside it; both are
/// acknowledged once the replica answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_for_a_replica_holds_up_no_other_write_to_its_primary() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    let store = Arc::new(store);
    // Two keys on one primary, found by which primary each first count lands on.
    let primaries = [topology.base, topology.base + 1, topology.base + 2];
    let sizes = || primaries.map(|port| topology.cli(port, &["DBSIZE"]).parse::<u64>().unwrap());
    let mut on: Vec<(u16, String)> = Vec::new();
    let (primary, keys) = loop {
        let key = format!("waits-{}", on.len());
        let before = sizes();
        assert_eq!(add_one(&*store, &key).await.unwrap(), 1, "acknowledged while the replicas answer");
        let after = sizes();
        let [port] = (0..3).filter(|&i| after[i] > before[i]).map(|i| primaries[i]).collect::<Vec<_>>()[..] else {
            panic!("{key} landed on no one primary: {before:?} -> {after:?}");
        };
        if let Some((_, other)) = on.iter().find(|(p, _)| *p == port) {
            break (port, [other.clone(), key]);
        }
        on.push((port, key));
    };
    // ROLE on a primary: master, offset, then each replica's host, port, offset.
    let role = topology.cli(primary, &["ROLE"]);
    let replica = role.lines().nth(3).unwrap_or_else(|| panic!("{primary} has no replica: {role}"));
    let pid = std::fs::read_to_string(topology.dir.join(format!("redis-{replica}.pid"))).unwrap();
    let stopped = Stopped::new(pid.trim());
    let write = |key: String| {
        let store = store.clone();
        tokio::spawn(async move { add_one(&*store, &key).await })
    };
    let first = write(keys[0].clone());
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = write(keys[1].clone());
    tokio::time::sleep(Duration::from_millis(150)).await;
    // Had the second write queued behind the first one's `WAIT`, its
    // compare-and-set would not have run yet.
    assert_eq!(count(&*store, &keys[1]).await, 2, "the second write ran while the first waited");
    assert!(!first.is_finished() && !second.is_finished(), "both wait for the stopped replica");
    // The replica goes on within both writes' `WAIT` (1 s): acknowledged then.
    drop(stopped);
    assert_eq!(first.await.unwrap().unwrap(), 2);
    assert_eq!(second.await.unwrap().unwrap(), 2);
}
