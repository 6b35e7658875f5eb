//! Runs `limit-store serve` as a child process on a free port, and speaks
//! plain HTTP/1.1 to it over a real socket.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use super::http::{request, Reply};

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

impl Serve {
    /// Starts `serve` with `args` and `env`, and waits until it answers.
    pub async fn start(config: Option<&Path>, env: &[(&str, &str)], args: &[&str]) -> Serve {
        Self::start_logging(config, env, args, None).await
    }

    /// [`Serve::start`], writing its log lines to `log`.
    pub async fn start_logging(
        config: Option<&Path>,
        env: &[(&str, &str)],
        args: &[&str],
        log: Option<&Path>,
    ) -> Serve {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_limit-store"));
        let stderr = match log {
            Some(log) => Stdio::from(std::fs::File::create(log).unwrap()),
            None => Stdio::null(),
        };
        command.args(["serve", "--listen", &addr]).args(args).stdout(Stdio::null()).stderr(stderr);
        command.env_remove("LIMIT_STORE_API_TOKEN").env_remove("LIMIT_STORE_SECRET");
        command.env_remove("LIMIT_STORE_DATABASE_URL");
        if let Some(config) = config {
            command.args(["--config", config.to_str().unwrap()]);
        }
        for (k, v) in env {
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
}
