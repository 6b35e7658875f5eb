//! What the TLS tests share: certificates made once for the process (a CA
//! that `SSL_CERT_FILE` trusts, and a stranger's CA that nothing trusts,
//! each with a certificate for 127.0.0.1), and the Redis processes of a
//! test's own, TLS only, killed when dropped even when the test fails.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The certificates' folders: `ca.pem`, `server.pem` and `server.key` in each.
pub struct Certs {
    /// The CA `SSL_CERT_FILE` names, and a server certificate it signed.
    pub trusted: PathBuf,
    /// Another CA, which the client does not trust, and its certificate.
    pub stranger: PathBuf,
    root: PathBuf,
}

/// The certificates, made at the first call, which also points
/// `SSL_CERT_FILE` at the trusted CA: once, before any test connects, as the
/// variable is the whole process's. `None` (said) without openssl or
/// redis-server.
pub fn certs() -> Option<&'static Certs> {
    static CERTS: OnceLock<Option<Certs>> = OnceLock::new();
    let certs = CERTS.get_or_init(|| {
        for (program, version) in [("openssl", "version"), ("redis-server", "--version")] {
            if Command::new(program).arg(version).output().is_err() {
                eprintln!("{program} is not installed");
                return None;
            }
        }
        let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        forget_old_runs(&tmp);
        let root = tmp.join(format!("redis-tls-{}-{:x}", std::process::id(), crate::common::rand_suffix()));
        let certs = Certs { trusted: root.join("trusted"), stranger: root.join("stranger"), root };
        for dir in [&certs.trusted, &certs.stranger] {
            std::fs::create_dir_all(dir).unwrap();
            certificates(dir);
        }
        std::env::set_var("SSL_CERT_FILE", certs.trusted.join("ca.pem"));
        Some(certs)
    });
    if certs.is_none() {
        eprintln!("skipped: no certificates or no redis-server");
    }
    certs.as_ref()
}

/// Removes the folders of runs over an hour old: a run's certificates stay
/// while any of its tests may connect, so each run leaves its own behind.
fn forget_old_runs(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > Duration::from_secs(3600)));
        if old && entry.file_name().to_string_lossy().starts_with("redis-tls-") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .env("OPENSSL_CONF", dir.join("openssl.cnf"))
        .args(args)
        .output()
        .expect("run openssl");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, and a certificate for 127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &Path) {
    // No prompt, and a CA certificate of version 3 that says it is one (a
    // version 1 certificate, which the server sends along, fails to parse).
    let cnf = "[req]\ndistinguished_name = dn\nprompt = no\nx509_extensions = ca\n[dn]\nCN = limit-store test\n\
               [ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
               subjectKeyIdentifier = hash\n";
    std::fs::write(dir.join("openssl.cnf"), cnf).unwrap();
    std::fs::write(dir.join("san.ext"), "subjectAltName = IP:127.0.0.1, DNS:localhost\n").unwrap();
    // Each CA a name of its own, as CAs have: a verifier finds the issuer by name.
    let ca = format!("/CN=limit-store test CA {}", dir.file_name().unwrap().to_string_lossy());
    openssl(
        dir,
        &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-subj", &ca],
    );
    #[rustfmt::skip]
    openssl(dir, &[
        "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
    ]);
    #[rustfmt::skip]
    openssl(dir, &[
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext",
    ]);
}

/// `n` distinct free local ports; with `bus`, each with its port + 10000
/// free too (a cluster node's bus).
pub fn free_ports(n: usize, bus: bool) -> Vec<u16> {
    let mut held = Vec::new();
    while held.len() < n {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if !bus || (port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()) {
            held.push(listener);
        }
    }
    held.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// Processes of a test's own in a scratch folder: killed, and the folder
/// removed, when dropped.
pub struct Procs {
    pub dir: PathBuf,
    ca: PathBuf,
    children: Vec<Child>,
}

impl Procs {
    pub fn new(certs: &Certs, label: &str) -> Procs {
        let dir = certs.root.join(format!("{label}-{:x}", crate::common::rand_suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        Procs { dir, ca: certs.trusted.join("ca.pem"), children: Vec::new() }
    }

    /// Starts a `redis-server` that speaks TLS only, on `port` (its
    /// replication too), with the trusted CA's certificate and `args`, and
    /// waits until it listens.
    pub fn server(&mut self, port: u16, args: &[&str]) {
        let mut all: Vec<String> = ["--port", "0", "--tls-port", &port.to_string(), "--bind", "127.0.0.1"]
            .into_iter()
            .chain(["--save", "", "--appendonly", "no", "--dir", &self.dir.display().to_string()])
            .map(str::to_owned)
            .collect();
        all.extend(self.tls().into_iter().flat_map(|(k, v)| [format!("--{k}"), v]));
        all.extend(args.iter().map(|a| (*a).to_owned()));
        self.spawn(port, &all);
    }

    /// Starts a Sentinel on `port`, TLS only, with the trusted CA's
    /// certificate, watching the primary on `primary` as `name` (quorum 1).
    pub fn sentinel(&mut self, port: u16, name: &str, primary: u16) {
        let mut conf = format!("port 0\ntls-port {port}\nbind 127.0.0.1\ndir {}\n", self.dir.display());
        for (key, value) in self.tls() {
            conf += &format!("{key} {value}\n");
        }
        conf += &format!(
            "sentinel monitor {name} 127.0.0.1 {primary} 1\nsentinel down-after-milliseconds {name} 1000\n\
             sentinel failover-timeout {name} 5000\n"
        );
        let file = self.dir.join(format!("sentinel-{port}.conf"));
        std::fs::write(&file, conf).unwrap();
        self.spawn(port, &[file.display().to_string(), "--sentinel".to_owned()]);
    }

    /// The TLS settings of every process: certificate, key and CA files of
    /// the trusted CA, replication over TLS, no client certificates.
    fn tls(&self) -> Vec<(&'static str, String)> {
        let dir = self.ca.parent().unwrap();
        let file = |name: &str| dir.join(name).display().to_string();
        vec![
            ("tls-cert-file", file("server.pem")),
            ("tls-key-file", file("server.key")),
            ("tls-ca-cert-file", file("ca.pem")),
            ("tls-auth-clients", "no".to_owned()),
            ("tls-replication", "yes".to_owned()),
        ]
    }

    fn spawn(&mut self, port: u16, args: &[String]) {
        let log = std::fs::File::create(self.dir.join(format!("redis-{port}.log"))).unwrap();
        let child = Command::new("redis-server")
            .args(args)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.children.push(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(10), "nothing listens on {port}: see {:?}", self.dir);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis-cli` over TLS, trusting the CA, with `args`: its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["--tls", "--cacert", &self.ca.display().to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// [`cli`](Self::cli) on the server at `port`.
    pub fn on(&self, port: u16, args: &[&str]) -> String {
        self.cli(&[&["-p", &port.to_string()], args].concat())
    }

    /// Waits up to `secs` seconds for `ready`.
    pub fn wait(&self, secs: u64, what: &str, mut ready: impl FnMut() -> bool) {
        let started = Instant::now();
        while !ready() {
            assert!(started.elapsed() < Duration::from_secs(secs), "{what} not in {secs} s: see {:?}", self.dir);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
        }
        for child in &mut self.children {
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The whole chain of `e`'s messages, source after source.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text += &format!(": {s}");
        source = s.source();
    }
    text
}
