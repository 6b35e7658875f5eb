//! `redis+sentinel://` on a real Sentinel topology of the test's own
//! (`.ci/redis-topologies sentinel`: a primary, a replica, three Sentinels):
//! the store asks Sentinel for the primary, and through a `SENTINEL FAILOVER`
//! under load every call is answered within 2.5 s, counting resumes on the
//! same store with no restart, and with `min_replicas_acked = 1` no
//! acknowledged count is lost; Sentinels that require a password are asked
//! with the URL's.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::load::{add_one, check_after_outage, Load};
use crate::common::redis::{Stopped, SECRET};
use crate::common::serve::limit_store;
use limit_store::{Guarded, LimitStore, RedisStore};

/// A Sentinel topology, stopped when dropped.
struct Topology {
    dir: PathBuf,
    base: u16,
    url: String,
    /// What every server and Sentinel requires, if anything.
    password: Option<&'static str>,
}

impl Topology {
    fn start() -> Option<Topology> {
        Topology::start_with(None)
    }

    /// With `password`, every server and Sentinel requires it.
    fn start_with(password: Option<&'static str>) -> Option<Topology> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            eprintln!("skipped: redis-server is not installed");
            return None;
        }
        let base = free_ports(5);
        let dir = std::env::temp_dir().join(format!("lst-sentinel-{}-{base}", std::process::id()));
        let mut args = vec!["sentinel".to_owned(), dir.to_str().unwrap().to_owned(), base.to_string()];
        args.extend(password.map(str::to_owned));
        let out = Command::new(script()).args(&args).output().unwrap();
        let url = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        let topology = Topology { dir, base, url, password };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        Some(topology)
    }

    fn cli(&self, port: u16, args: &[&str]) -> String {
        let mut cli = Command::new("redis-cli");
        if let Some(password) = self.password {
            cli.env("REDISCLI_AUTH", password);
        }
        let out = cli.args(["-p", &port.to_string()]).args(args).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Asks the first Sentinel for a failover, and waits until it names a
    /// primary other than `old`.
    async fn fail_over(&self, old: &str) {
        assert_eq!(self.cli(self.base + 2, &["SENTINEL", "FAILOVER", "limit-store"]), "OK");
        let began = Instant::now();
        while self.primary() == old {
            assert!(began.elapsed() < Duration::from_secs(20), "Sentinel never failed over");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("failed over to {} in {:?}", self.primary(), began.elapsed());
    }

    /// The primary's port, as the first Sentinel names it.
    fn primary(&self) -> String {
        let named = self.cli(self.base + 2, &["SENTINEL", "get-master-addr-by-name", "limit-store"]);
        named.lines().last().unwrap_or_default().to_owned()
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

/// The first of `n` consecutive free ports.
fn free_ports(n: u16) -> u16 {
    // Two tests of this process start topologies at once: apart by a count.
    static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let nth = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let start = 20_000 + u16::try_from(std::process::id() % 1_000).unwrap() * 30 + nth * 10;
    (start..60_000)
        .step_by(usize::from(n))
        .find(|&base| (base..base + n).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()))
        .expect("free ports")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_failover_under_load_loses_no_acknowledged_count() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let old = topology.primary();
    assert_eq!(old, topology.base.to_string());
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    assert_eq!(add_one(&store, "first").await.unwrap(), 1, "Sentinel named the primary");
    let store = Arc::new(Guarded::new(Arc::new(store) as Arc<dyn LimitStore>));
    let load = Load::start(store.clone(), "sentinel");
    tokio::time::sleep(Duration::from_secs(1)).await;

    topology.fail_over(&old).await;
    load.server_is_back();
    let tallies = load.finish().await;
    check_after_outage(&store, &tallies).await;
    // The counts live on the new primary: the old one is its replica now.
    assert_eq!(add_one(&*store, "first").await.unwrap(), 2);
}

/// `Limits` counting a GCRA through the integer script keeps the same
/// promises through a `SENTINEL FAILOVER` under load: every attempt is
/// answered within 2.5 s, counting resumes with no restart, and with
/// `min_replicas_acked = 1` no acknowledged count is lost. With a 10 s
/// interval the key's TAT is its first count's clock plus one interval per
/// count stored, so the TAT says how many were.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn integer_counts_through_a_sentinel_failover_lose_no_acknowledged_count() {
    use limit_store::limits::{Algorithm, Limit, Part};
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let old = topology.primary();
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    let store = Arc::new(store);
    let part = Part::new("who", Algorithm::gcra(100_000, Duration::from_secs(1_000_000)));
    let limits = limit_store::Limits::builder()
        .store(store.clone())
        .without_presets()
        .limit(Limit::new("door").part(part))
        .build()
        .unwrap();
    let first = limits.attempt("door", &[("who", "k")]).await.unwrap();
    assert!(first.allowed && first.degraded.is_none(), "{first:?}");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (limits, stop) = (limits.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut acked, mut failed, mut slowest) = (0u64, 0u64, Duration::ZERO);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let began = Instant::now();
                    let decided = limits.attempt("door", &[("who", "k")]).await.unwrap();
                    slowest = slowest.max(began.elapsed());
                    match decided.degraded {
                        None => acked += 1,
                        Some(_) => failed += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (acked, failed, slowest)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    topology.fail_over(&old).await;
    // Counting resumes on the new primary, acknowledged by the old one.
    let (resumed, mut failed) = (Instant::now(), 0);
    while limits.attempt("door", &[("who", "k")]).await.unwrap().degraded.is_some() {
        assert!(resumed.elapsed() < Duration::from_secs(30), "counting never resumed");
        failed += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = 2;
    for task in tasks {
        let (a, f, slowest) = task.await.unwrap();
        assert!(slowest < Duration::from_millis(2_500), "an attempt took {slowest:?}");
        (acked, failed) = (acked + a, failed + f);
    }
    let entry = store.read(&["door:who:k"]).await.unwrap()[0].clone().expect("the key lives on the new primary");
    let stored = u64::try_from((entry.expires_at - first.now) / 10_000).unwrap();
    assert!((acked..=acked + failed).contains(&stored), "{stored} stored, {acked} acknowledged, {failed} not");
}

/// Sentinels (and servers) that require a password are asked with the URL's,
/// before and after a failover; without it the store is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_require_a_password_are_asked_with_the_urls() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start_with(Some("sentinel-secret")) else { return };
    assert!(topology.url.starts_with("redis+sentinel://:sentinel-secret@"), "{}", topology.url);
    let old = topology.primary();
    assert_eq!(old, topology.base.to_string(), "redis-cli asks with the password");
    let bare = topology.url.replace(":sentinel-secret@", "");
    let err = RedisStore::builder(&bare).secret(SECRET).connect().await.unwrap_err().to_string();
    assert!(err.contains("primary"), "no password: refused, saying so: {err}");
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    assert_eq!(add_one(&store, "first").await.unwrap(), 1, "Sentinel named the primary");

    topology.fail_over(&old).await;
    // The store finds the new primary by asking the Sentinels (with the
    // password) or from their `+switch-master` message.
    // Until the old primary is the new one's replica, counts are written but
    // not acknowledged (min_replicas_acked): each may be stored.
    let (began, mut failed) = (Instant::now(), 0);
    let counted = loop {
        match add_one(&store, "first").await {
            Ok(n) => break n,
            Err(e) => assert!(began.elapsed() < Duration::from_secs(30), "counting never resumed: {e}"),
        }
        failed += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!((2..=2 + failed).contains(&counted), "the acknowledged count survived: {counted}, {failed} failed");
}

#[tokio::test(flavor = "current_thread")]
async fn a_bad_sentinel_url_or_name_is_refused_with_what_to_fix() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let err = RedisStore::builder(&topology.url.replace("/limit-store", "/nobody")).secret(SECRET).connect().await;
    let err = err.unwrap_err().to_string();
    assert!(err.contains("nobody") && err.contains("primary"), "{err}");
    let err = RedisStore::builder("redis+sentinel://127.0.0.1:1").secret(SECRET).connect().await.unwrap_err();
    assert!(err.to_string().contains("MASTER_NAME"), "{err}");
}

/// The contract suite, as `limit-store contract` runs it, with two handles on
/// a Sentinel URL.
#[tokio::test(flavor = "current_thread")]
async fn the_contract_holds_through_sentinel() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let out = limit_store().args(["contract", &topology.url]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(!text.contains("FAIL"), "{text}");
}

#[test]
fn min_replicas_acked_is_a_setting() {
    let config = "[rate_limit]\nstore = \"redis\"\nredis_url = \"redis+sentinel://127.0.0.1:26379/limit-store\"\n";
    let parsed = limit_store::config::Config::parse(&format!("{config}redis_min_replicas_acked = 1\n")).unwrap();
    assert_eq!(parsed.redis_min_replicas_acked, 1);
    assert_eq!(limit_store::config::Config::parse(config).unwrap().redis_min_replicas_acked, 0, "the default");
    let err = limit_store::config::Config::parse(&format!("{config}redis_min_replicas_acked = -1\n")).unwrap_err();
    assert!(err.to_string().contains("replicas"), "{err}");
}

/// With `min_replicas_acked`, a write waiting for a silent replica (`WAIT`
/// holds its connection until the replicas answer) holds up no other call:
/// the waiting writes have connections of their own, so a read sent while
/// one waits is answered before it, and the write once the replica answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_waiting_for_a_replica_holds_up_no_other_call() {
    let _alone = crate::alone().await;
    let Some(topology) = Topology::start() else { return };
    let store = RedisStore::builder(&topology.url).secret(SECRET).min_replicas_acked(1).connect().await.unwrap();
    let store = Arc::new(store);
    assert_eq!(add_one(&*store, "waits").await.unwrap(), 1, "acknowledged while the replica answers");
    let replica = topology.base + 1;
    let pid = std::fs::read_to_string(topology.dir.join(format!("redis-{replica}.pid"))).unwrap();
    let stopped = Stopped::new(pid.trim());
    let waiting = tokio::spawn({
        let store = store.clone();
        async move { add_one(&*store, "waits").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.read(&["other"]).await.unwrap();
    assert!(!waiting.is_finished(), "the read was answered while the write still waited for the replica");
    // The replica goes on within the write's `WAIT` (1 s): acknowledged then.
    // Had the read queued behind that `WAIT`, the replica would have stayed
    // stopped until the `WAIT` ran out, and the write be answered unacknowledged.
    drop(stopped);
    assert_eq!(waiting.await.unwrap().unwrap(), 2);
}
