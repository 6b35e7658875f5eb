//! Runs `limit-store serve` as a child process on a free port (one, or the
//! several instances of one site), and speaks plain HTTP/1.1 to it over a
//! real socket.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub use super::http::{parse, request, Reply};

/// The `limit-store` binary of this build.
const BIN: &str = env!("CARGO_BIN_EXE_limit-store");

/// The `limit-store` binary of this build, as a command to run.
pub fn limit_store() -> Command {
    Command::new(BIN)
}

/// A running `serve`; killed when dropped.
pub struct Serve {
    pub child: Child,
    pub addr: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Writes `text` to a settings file of its own in the temp folder; its path.
pub fn settings_file(text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("limit-store-{}.toml", super::rand_suffix()));
    std::fs::write(&path, text).unwrap();
    path
}

/// A folder of this test's own in the temp folder, empty.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("limit-store-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// How to start `serve`: [`Serve::start`] takes the usual parts; this adds
/// a log file and a limit on the process's open files.
#[derive(Default)]
pub struct Start<'a> {
    pub config: Option<&'a Path>,
    pub env: &'a [(&'a str, &'a str)],
    pub args: &'a [&'a str],
    /// Where its log lines go (nowhere when `None`).
    pub log: Option<&'a Path>,
    /// `ulimit -n` for the process (soft and hard).
    pub open_files: Option<u64>,
}

impl Serve {
    /// Starts `serve` with `args` and `env`, and waits until it answers.
    pub async fn start(config: Option<&Path>, env: &[(&str, &str)], args: &[&str]) -> Serve {
        Self::start_with(Start { config, env, args, ..Start::default() }).await
    }

    /// [`Serve::start`], writing its log lines to `log`.
    pub async fn start_logging(
        config: Option<&Path>,
        env: &[(&str, &str)],
        args: &[&str],
        log: Option<&Path>,
    ) -> Serve {
        Self::start_with(Start { config, env, args, log, ..Start::default() }).await
    }

    /// Starts `serve` as `start` says, and waits until it answers.
    pub async fn start_with(start: Start<'_>) -> Serve {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut command = match start.open_files {
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", &format!("ulimit -n {n} && exec \"$0\" \"$@\""), BIN]);
                sh
            }
            None => limit_store(),
        };
        let stderr = match start.log {
            Some(log) => Stdio::from(std::fs::File::create(log).unwrap()),
            None => Stdio::null(),
        };
        command.args(["serve", "--listen", &addr]).args(start.args).stdout(Stdio::null()).stderr(stderr);
        command.env_remove("LIMIT_STORE_API_TOKEN").env_remove("LIMIT_STORE_SECRET");
        command.env_remove("LIMIT_STORE_DATABASE_URL");
        if let Some(config) = start.config {
            command.args(["--config", config.to_str().unwrap()]);
        }
        for (k, v) in start.env {
            command.env(k, v);
        }
        let serve = Serve { child: command.spawn().expect("start limit-store serve"), addr };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(r) = serve.request("GET", "/healthz", &[], b"").await {
                if r.status == 200 {
                    return serve;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("serve did not answer on {} within 20 s", serve.addr);
    }

    /// `n` processes on the settings file `config`, each started with
    /// `env`: the instances of one site.
    pub async fn start_many(n: usize, config: &Path, env: &[(&str, &str)]) -> Vec<Serve> {
        let mut instances = Vec::new();
        for _ in 0..n {
            instances.push(Serve::start(Some(config), env, &[]).await);
        }
        instances
    }

    /// One request; `headers` as `(name, value)`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Reply> {
        request(&self.addr, method, path, headers, body).await
    }

    /// A JSON POST.
    pub async fn post(&self, path: &str, body: &str) -> Reply {
        self.request("POST", path, &[("content-type", "application/json")], body.as_bytes()).await.unwrap()
    }

    /// Sends the process signal `name` (`HUP`, `TERM`).
    pub fn signal(&self, name: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([&format!("-{name}"), &pid]).status().unwrap().success());
    }

    /// How the process ended, if it did within `limit`.
    pub async fn exit_within(&mut self, limit: Duration) -> Option<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if started.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// POSTs each of `bodies` as JSON to `path`, all at once, spread over
/// `instances` (body `i` to instance `i` mod their number); the statuses, in
/// the bodies' order.
pub async fn post_at_once(instances: &[Serve], path: &str, bodies: impl IntoIterator<Item = String>) -> Vec<u16> {
    let calls: Vec<_> = bodies
        .into_iter()
        .enumerate()
        .map(|(i, body)| {
            let addr = instances[i % instances.len()].addr.clone();
            let path = path.to_owned();
            tokio::spawn(async move {
                let json = [("content-type", "application/json")];
                request(&addr, "POST", &path, &json, body.as_bytes()).await.unwrap().status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for call in calls {
        statuses.push(call.await.unwrap());
    }
    statuses
}

/// Sends `bytes` as they are and reads what comes back until the server
/// closes (or 10 s pass): for requests no client library would send.
pub async fn raw(addr: &str, bytes: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("the server closes");
    parse(&answer)
}

/// Everything the server sends until it closes; `None` if it is still open
/// after `limit`. A reset counts as closed.
pub async fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0) | Err(_)) => return Some(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}
