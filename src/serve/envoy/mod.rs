//! Envoy's rate limit service (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`),
//! for `serve --grpc-listen`: envoy, Istio or Envoy Gateway ask it whether a
//! request may pass, with descriptors their route config builds.
//!
//! The rules come from YAML in envoy's ratelimit service format
//! (`rate_limit.envoy_config`: a file, or a directory of `*.yaml`/`*.yml`),
//! and are matched as envoy's own service matches them (see `matching.rs`).
//! Unlike envoy's service, one request is counted exactly and atomically:
//! every rule its descriptors match is counted in one update of the store,
//! on the store's clock, and a request that any rule refuses counts nothing
//! on any rule. Each rule counts in a fixed window of its unit that opens at
//! its key's first counted hit (envoy's own service aligns windows to the
//! wall clock instead: both are the same on every instance sharing a store).
//!
//! A store that doesn't answer is answered with gRPC `UNAVAILABLE`: envoy's
//! filter then lets the request through, or refuses it with
//! `failure_mode_deny: true`, so the policy lives in envoy's config.

mod counting;
mod incoming;
mod matching;
mod metrics;
mod rules;
mod server;
mod service;
mod yaml;

use std::path::Path;
use std::sync::Arc;

pub(crate) use rules::Rules;
pub(crate) use server::run_envoy;
pub(crate) use service::EnvoyService;

use limit_store::config::ConfigError;

/// The rules the service answers with, which a reload replaces: a call
/// keeps the ones it started with. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub(crate) struct EnvoyRules(Arc<parking_lot::RwLock<Arc<Rules>>>);

impl EnvoyRules {
    /// The rules of `path` (a YAML file or a directory of them); logs their
    /// domains and how many there are.
    pub(crate) fn load(path: &Path) -> Result<Self, ConfigError> {
        let rules = Rules::load(path)?;
        tracing::info!(
            kind = limit_store::log::Kind::EnvoyLoaded.as_str(),
            config = %path.display(),
            domains = ?rules.domains(),
            rules = rules.len(),
            "loaded the Envoy rules"
        );
        Ok(EnvoyRules::new(rules))
    }

    /// A handle on `rules`.
    pub(crate) fn new(rules: Rules) -> Self {
        EnvoyRules(Arc::new(parking_lot::RwLock::new(Arc::new(rules))))
    }

    /// The rules now.
    pub(crate) fn current(&self) -> Arc<Rules> {
        self.0.read().clone()
    }

    /// Reads `path` again: its rules answer from now on, and the counts are
    /// kept (a rule's key is its descriptor's, whatever its budget). A file
    /// that can't be used is refused, and the running rules stay. Logged
    /// either way: serve calls it when its settings are reloaded, and
    /// [`watch`](Self::watch) when the YAML changes.
    pub(crate) fn reload(&self, path: &Path) {
        let loaded = Rules::load(path).map(|rules| *self.0.write() = Arc::new(rules));
        match loaded {
            Ok(()) => tracing::info!(
                kind = limit_store::log::Kind::EnvoyReloaded.as_str(),
                rules = self.current().len(),
                "reloaded the Envoy rules; the counts are kept"
            ),
            Err(e) => tracing::error!(
                kind = limit_store::log::Kind::EnvoyRefused.as_str(),
                error = %e,
                "the changed Envoy rules were refused; the running ones stay"
            ),
        }
    }

    /// Reloads the rules whenever the YAML at `path` changes (a file's
    /// modification time, or a directory's files), looked at every 2 s.
    pub(crate) async fn watch(self, path: std::path::PathBuf) {
        let mut seen = fingerprint(&path);
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            let now = fingerprint(&path);
            if now != seen {
                seen = now;
                self.reload(&path);
            }
        }
    }
}

/// The files at `path` with their modification times.
fn fingerprint(path: &Path) -> Vec<(std::path::PathBuf, Option<std::time::SystemTime>)> {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let mut files = match std::fs::read_dir(path) {
        Ok(dir) => dir.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => vec![path.to_owned()],
    };
    files.sort();
    files.into_iter().map(|p| (modified(&p), p)).map(|(m, p)| (p, m)).collect()
}
