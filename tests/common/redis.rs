//! A Redis server of a test's own, on a free port, for what no test may do
//! to the shared one: pause it, shut it down, or change its settings. It is
//! stopped when dropped, even when the test fails.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The shared server's URL, or `None` (the test says it was skipped) when
/// `LIMIT_STORE_TEST_REDIS` is not set.
pub fn server() -> Option<String> {
    super::server("LIMIT_STORE_TEST_REDIS")
}

/// A site secret for tests.
pub const SECRET: &str = "limit-store redis tests: a secret of 32 bytes or more";

/// A `redis-server` process of this test's own.
pub struct OwnRedis {
    port: u16,
    args: Vec<String>,
    tls: bool,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts one with `args` added to a memory-only setup; `None` (skipped)
    /// where `redis-server` is not installed.
    pub fn start(args: &[&str]) -> Option<OwnRedis> {
        if Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_err() {
            eprintln!("skipped: redis-server is not installed");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut own = OwnRedis { port, args: args.iter().map(|a| (*a).to_owned()).collect(), tls: false, child: None };
        own.run();
        Some(own)
    }

    /// Starts one that speaks only TLS, with the certificate and key in
    /// `dir` (`server.pem`, `server.key`, `ca.pem`).
    pub fn start_tls(dir: &std::path::Path) -> Option<OwnRedis> {
        let file = |name: &str| dir.join(name).display().to_string();
        let mut own = OwnRedis::start_later(&[
            "--tls-cert-file",
            &file("server.pem"),
            "--tls-key-file",
            &file("server.key"),
            "--tls-ca-cert-file",
            &file("ca.pem"),
            "--tls-auth-clients",
            "no",
        ])?;
        own.tls = true;
        own.run();
        Some(own)
    }

    fn start_later(args: &[&str]) -> Option<OwnRedis> {
        if Command::new("redis-server").arg("--version").stdout(Stdio::null()).status().is_err() {
            eprintln!("skipped: redis-server is not installed");
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Some(OwnRedis { port, args: args.iter().map(|a| (*a).to_owned()).collect(), tls: false, child: None })
    }

    /// `redis://127.0.0.1:<port>`, or `rediss://` for a TLS server.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}", if self.tls { "rediss" } else { "redis" }, self.port)
    }

    fn run(&mut self) {
        let port = self.port.to_string();
        let ports: [&str; 4] =
            if self.tls { ["--port", "0", "--tls-port", &port] } else { ["--port", &port, "--tls-port", "0"] };
        let child = Command::new("redis-server")
            .args(ports)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "redis-server did not start on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the server (as a crash or `SHUTDOWN` would: its data is gone).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// Runs `redis-cli` on it with `args`; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out =
            Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args).output().expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Counts one attempt on both `keys` (`{"n": n}` each) if both are under
/// `budget`; answers whether it was counted.
pub async fn attempt_both(
    store: &dyn limit_store::LimitStore,
    keys: [&str; 2],
    budget: u64,
) -> Result<bool, limit_store::StoreError> {
    use limit_store::{update_with, Entry, Write};
    update_with(store, &keys, |current, now| {
        let n: Vec<u64> = current.iter().map(|e| e.as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0)).collect();
        if n.iter().any(|&n| n >= budget) {
            return (vec![Write::Keep, Write::Keep], false);
        }
        let put = |n: u64| Write::Put(Entry { value: serde_json::json!({ "n": n + 1 }), expires_at: now + 600_000 });
        (vec![put(n[0]), put(n[1])], true)
    })
    .await
}

/// The updates `store` did in one round trip, in two, and in more, since it
/// was made ([`RedisInfo`](limit_store::RedisInfo)).
pub async fn trips(store: &limit_store::RedisStore) -> (u64, u64, u64) {
    let info = store.info().await.expect("the store's info");
    (info.one_round_trip, info.two_round_trips, info.more_round_trips)
}

/// A process stopped with `SIGSTOP` (a replica gone silent), sent `SIGCONT`
/// when dropped, even when the test fails.
pub struct Stopped(String);

impl Stopped {
    /// Stops the process `pid`.
    pub fn new(pid: &str) -> Self {
        assert!(Command::new("kill").args(["-STOP", pid]).status().unwrap().success());
        Stopped(pid.to_owned())
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// The store's secret, to name keys as the store does: HMAC-SHA-256 of
/// the key under it.
pub struct Secret(hmac::Hmac<sha2::Sha256>);

impl Secret {
    pub fn new(secret: &str) -> Result<Self, hmac::digest::InvalidLength> {
        <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(secret.as_bytes()).map(Secret)
    }

    fn key_hash(&self, key: &str) -> [u8; 32] {
        hmac::Mac::finalize(hmac::Mac::chain_update(self.0.clone(), key)).into_bytes().into()
    }
}

/// The hash tag of the keys named for `name` on a cluster: their hash.
pub fn tag_of(secret: &Secret, name: &str) -> String {
    use std::fmt::Write as _;
    let mut tag = String::with_capacity(66);
    tag.push('{');
    for byte in secret.key_hash(name) {
        write!(tag, "{byte:02x}").unwrap();
    }
    tag.push('}');
    tag
}

/// The slot of the keys named for `name` on a cluster.
pub fn slot_of(secret: &Secret, name: &str) -> redis::cluster_routing::Slot {
    redis::cluster_routing::Slot::for_key(tag_of(secret, name))
}

/// Names `{label}-{i}` whose keys, hashed under `secret`, lie in `slots`,
/// `n` of them.
pub fn names_in(secret: &Secret, label: &str, slots: std::ops::Range<u16>, n: usize) -> Vec<String> {
    let slots: Vec<_> = slots.map(|s| redis::cluster_routing::Slot::new(s).unwrap()).collect();
    (0..).map(|i| format!("{label}-{i}")).filter(|name| slots.contains(&slot_of(secret, name))).take(n).collect()
}
