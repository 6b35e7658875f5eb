//! [`run`]: `limit-store serve` whole, from its settings to its shutdown:
//! the store opened behind one guard, the limits built on it, HTTP (and
//! Envoy's gRPC service) served, the settings reloaded on SIGHUP or when
//! the file changes, and a bounded drain at SIGTERM or Ctrl-C.

use std::error::Error;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::envoy::{run_envoy, EnvoyRules, EnvoyService};
use super::{listener, router_on, ApiToken, LimitsHandle};
use limit_store::config::{Config, StoreKind};
use limit_store::log::Kind;
use limit_store::{LimitStore, Limits};

/// An error of [`run`]: what failed, its causes as its sources (`main`
/// says them, each once).
type RunError = Box<dyn Error + Send + Sync>;

/// What failed, with the error as its source.
#[derive(Debug)]
struct Failed {
    what: String,
    error: RunError,
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)
    }
}

impl Error for Failed {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.error)
    }
}

/// `error` as the cause of `what` failing.
fn context<E: Into<RunError>>(what: impl std::fmt::Display) -> impl FnOnce(E) -> RunError {
    move |error| Box::new(Failed { what: what.to_string(), error: error.into() })
}

/// Serves the limits of `config` over HTTP on `listen` (and Envoy's rate
/// limit service on `grpc_listen`, with the rules of
/// `rate_limit.envoy_config`) until SIGTERM or Ctrl-C, then drains for at
/// most `serve.shutdown_grace`. With `token`, callers must send it; without
/// one, only loopback addresses are served. On SIGHUP, or when
/// `settings_file` changes (looked at every 2 s), the limits' settings are
/// read again and apply at once, on the same store behind the same guard,
/// so counts, calls in flight and counters are kept; a file that can't be
/// used is refused, with its error and line, and the running settings stay.
pub async fn run(
    config: Config,
    settings_file: Option<PathBuf>,
    listen: SocketAddr,
    grpc_listen: Option<SocketAddr>,
    token: Option<ApiToken>,
) -> Result<(), RunError> {
    if token.is_none() && !listen.ip().is_loopback() {
        return Err(format!(
            "serve listens on {listen} without a token: anyone who reaches it could clear a lockout. Set \
             LIMIT_STORE_API_TOKEN (or --token-file) to a long random string, or listen on 127.0.0.1"
        )
        .into());
    }
    // Signals are taken before anything listens, so none ends the process
    // by its default action once a client can reach it.
    let signals = Signals::new()?;
    let store = Arc::new(config.open_store().await.map_err(context("open the store"))?);
    let limits = LimitsHandle::new(store, config.apply(Limits::builder()))?;
    let envoy = match grpc_listen {
        Some(addr) => Some(Envoy::prepare(addr, &config, &limits, token.clone()).await?),
        None => None,
    };
    let mut settings = config.serve;
    settings.max_connections = connection_cap(settings.max_connections);
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(context(format!("listen on {listen}")))?;
    let store = match config.store {
        StoreKind::Memory => "memory".to_owned(),
        StoreKind::Database => format!("database {}", config.database_url),
        StoreKind::Redis => format!("redis {}", config.redis_url.as_ref().map(|u| u.to_string()).unwrap_or_default()),
    };
    tracing::info!(
        kind = Kind::Listening.as_str(),
        listen = %listener.local_addr()?,
        store,
        max_entries = limit_store::LimitStore::stats(&**limits.store()).map(|s| s.max_entries),
        max_connections = settings.max_connections,
        token = token.is_some(),
        "limit-store serve is listening"
    );
    let rules = envoy.as_ref().map(|e| e.reload.clone());
    tokio::spawn(reload(settings_file, signals.hangup, config, limits.clone(), rules));
    let router = router_on(limits, token, envoy.as_ref().map(|e| &e.service));
    // One count of connections for both ports: the open-file limit is the process's.
    let places = Arc::new(tokio::sync::Semaphore::new(settings.max_connections.max(1)));
    match envoy {
        None => listener::run(listener, router, &settings, places, signals.terminate).await?,
        Some(envoy) => {
            // One SIGTERM stops both listeners; each drains its own calls.
            let (stop, stopping) = tokio::sync::watch::channel(false);
            let terminate = signals.terminate;
            tokio::spawn(async move {
                terminate.await;
                let _ = stop.send(true);
            });
            let stopped = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
                let _ = stopping.wait_for(|&stop| stop).await;
            };
            let http = listener::run(listener, router, &settings, places.clone(), stopped(stopping.clone()));
            let grpc = run_envoy(envoy.listener, envoy.service, &settings, places, stopped(stopping));
            tokio::try_join!(async { http.await.map_err(context("serve HTTP")) }, async {
                grpc.await.map_err(context("serve gRPC"))
            })?;
        }
    }
    tracing::info!(kind = Kind::Stopped.as_str(), "limit-store serve stopped");
    Ok(())
}

/// The most connections the process can hold open: `wanted`, or fewer when
/// the open-file limit (raised to its hard limit first) leaves less room
/// beside the files the store and the runtime need.
#[cfg(unix)]
fn connection_cap(wanted: usize) -> usize {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    /// Files kept for all but the connections: the store's pool, the listener, logs.
    const OTHER_FILES: u64 = 64;
    let needed = u64::try_from(wanted).unwrap_or(u64::MAX).saturating_add(OTHER_FILES);
    let limit = getrlimit(Resource::Nofile);
    let mut soft = limit.current.unwrap_or(u64::MAX);
    if soft < needed {
        let raised = limit.maximum.map_or(needed, |hard| hard.min(needed));
        if setrlimit(Resource::Nofile, Rlimit { current: Some(raised), maximum: limit.maximum }).is_ok() {
            soft = raised;
        }
    }
    if soft >= needed {
        return wanted;
    }
    let cap = usize::try_from(soft.saturating_sub(OTHER_FILES).max(1)).unwrap_or(usize::MAX);
    tracing::warn!(
        kind = Kind::ConnectionsCapped.as_str(),
        max_connections = wanted,
        open_file_limit = soft,
        cap,
        "the open-file limit leaves room for {cap} connections, not serve.max_connections = {wanted}: \
         new connections past {cap} wait. Raise the limit (ulimit -n, LimitNOFILE=) or lower max_connections"
    );
    cap
}

#[cfg(not(unix))]
fn connection_cap(wanted: usize) -> usize {
    wanted
}

/// The signals `serve` answers, taken at start.
struct Signals {
    /// Resolves at SIGTERM or Ctrl-C.
    terminate: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    /// SIGHUP, one item each.
    hangup: Hangup,
}

#[cfg(unix)]
type Hangup = tokio::signal::unix::Signal;
#[cfg(not(unix))]
type Hangup = ();

impl Signals {
    #[cfg(unix)]
    fn new() -> Result<Self, RunError> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).map_err(context("take SIGTERM"))?;
        let hangup = signal(SignalKind::hangup()).map_err(context("take SIGHUP"))?;
        let terminate = Box::pin(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        Ok(Signals { terminate, hangup })
    }

    #[cfg(not(unix))]
    fn new() -> Result<Self, RunError> {
        let terminate = Box::pin(async {
            let _ = tokio::signal::ctrl_c().await;
        });
        Ok(Signals { terminate, hangup: () })
    }
}

/// The next SIGHUP (never, where there is none).
async fn hangup(signal: &mut Hangup) {
    #[cfg(unix)]
    if signal.recv().await.is_some() {
        return;
    }
    let _ = signal;
    std::future::pending::<()>().await
}

/// True when `a` and `b` open the same store: only the limits' settings differ.
fn same_store(a: &Config, b: &Config) -> bool {
    let store = |c: &Config| {
        (c.store, c.database_url.clone(), c.redis_url.clone(), c.redis_min_replicas_acked, c.table.clone())
    };
    let bound = |c: &Config| (c.secret.clone(), c.max_entries, c.durable_commits);
    store(a) == store(b) && bound(a) == bound(b)
}

/// Reloads the limits' settings from `path` on SIGHUP, or when the file
/// changes (looked at every 2 s). Without a file, SIGHUP has nothing to
/// reload: one line says so.
async fn reload(
    path: Option<PathBuf>,
    mut signal: Hangup,
    mut running: Config,
    limits: LimitsHandle,
    envoy: Option<(EnvoyRules, PathBuf)>,
) {
    let Some(path) = path else {
        loop {
            hangup(&mut signal).await;
            tracing::info!(
                kind = Kind::ConfigNotReloaded.as_str(),
                "SIGHUP: serve started without a settings file (--config or ./limit-store.toml), so there is \
                 nothing to reload; it serves on as it is"
            );
        }
    };
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut seen: Option<SystemTime> = modified(&path);
    loop {
        tokio::select! {
            () = hangup(&mut signal) => {}
            () = tokio::time::sleep(Duration::from_secs(2)) => {
                if modified(&path) == seen {
                    continue;
                }
            }
        }
        seen = modified(&path);
        if let Some((rules, yaml)) = &envoy {
            rules.reload(yaml);
        }
        let config = match Config::load(&path) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(kind = Kind::ConfigRefused.as_str(), error = %e, "the changed settings were refused; the running ones stay");
                continue;
            }
        };
        let at_start = (config.deadline, config.max_in_flight, config.serve);
        if !same_store(&config, &running) || at_start != (running.deadline, running.max_in_flight, running.serve) {
            tracing::warn!(
                kind = Kind::ConfigRestart.as_str(),
                "the store's, its guard's (deadline, max_in_flight) or [serve] settings changed: they apply at the \
                 next start; the limits' settings apply now"
            );
        }
        match limits.reload(config.apply(Limits::builder())) {
            Ok(()) => {
                running = config;
                tracing::info!(
                    kind = Kind::ConfigReloaded.as_str(),
                    "reloaded the limits' settings; the counts and counters are kept"
                );
            }
            Err(e) => {
                tracing::error!(kind = Kind::ConfigRefused.as_str(), error = %e, "the changed settings were refused; the running ones stay")
            }
        }
    }
}

/// `serve --grpc-listen`: the gRPC listener and service, and the rules'
/// reload handle and path.
struct Envoy {
    listener: tokio::net::TcpListener,
    service: EnvoyService,
    reload: (EnvoyRules, PathBuf),
}

impl Envoy {
    /// Loads the rules of `rate_limit.envoy_config`, and listens on `addr`.
    /// The service counts in the store of `limits`, behind the same guard,
    /// so HTTP and gRPC calls share one deadline and one in-flight cap.
    async fn prepare(
        addr: SocketAddr,
        config: &Config,
        limits: &LimitsHandle,
        token: Option<ApiToken>,
    ) -> Result<Envoy, RunError> {
        let Some(path) = config.envoy_config.clone() else {
            return Err("--grpc-listen answers Envoy with the rules of a YAML file: set rate_limit.envoy_config in \
                        the settings (or LIMIT_STORE_ENVOY_CONFIG) to the file or the directory of them"
                .into());
        };
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(format!(
                "serve answers gRPC on {addr} without a token: anyone who reaches it could spend any budget. Set \
                 LIMIT_STORE_API_TOKEN (or --token-file) to a long random string (envoy sends it as \
                 `authorization: Bearer <token>`), or use --grpc-listen 127.0.0.1:PORT"
            )
            .into());
        }
        let rules = EnvoyRules::load(&path)?;
        tokio::spawn(rules.clone().watch(path.clone()));
        let store: Arc<dyn LimitStore> = limits.store().clone();
        let listener =
            tokio::net::TcpListener::bind(addr).await.map_err(context(format!("listen on {addr} (gRPC)")))?;
        tracing::info!(
            kind = Kind::Listening.as_str(),
            grpc_listen = %listener.local_addr()?,
            token = token.is_some(),
            "limit-store serve answers Envoy's rate limit service"
        );
        Ok(Envoy { listener, service: EnvoyService::new(rules.clone(), store, token), reload: (rules, path) })
    }
}
