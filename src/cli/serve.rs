//! `limit-store serve`: the HTTP service, on the limits of `limit-store.toml`
//! (the presets on the memory store without one).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use limit_store::config::{Config, StoreKind};
use limit_store::serve::{ApiToken, EnvoyRules, LimitsHandle};
use limit_store::{Limits, SecretString};

use limit_store::log::Kind;

/// Options of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The settings file (default: ./limit-store.toml when it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Where to listen. Anything but loopback needs a token.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// A file holding the API token (instead of LIMIT_STORE_API_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The API token callers send as `Authorization: Bearer <token>`.
    #[arg(long = "token", env = "LIMIT_STORE_API_TOKEN", hide_env_values = true, hide = true)]
    token: Option<SecretString>,
    /// Also answer Envoy's rate limit service (gRPC) here, with the rules of
    /// rate_limit.envoy_config. Anything but loopback needs a token.
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
}

/// Loads the settings, builds the limits, and serves until SIGTERM or Ctrl-C.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let path = args.config.clone().or_else(|| {
        let default = PathBuf::from(limit_store::config::FILE);
        default.exists().then_some(default)
    });
    let mut config = super::settings(path.as_deref())?;
    if path.is_none() {
        // No settings: the presets on the memory store of this one process.
        config.single_instance = true;
    }
    let token = token(&args)?;
    if token.is_none() && !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "serve listens on {} without a token: anyone who reaches it could clear a lockout. Set \
             LIMIT_STORE_API_TOKEN (or --token-file) to a long random string, or listen on 127.0.0.1",
            args.listen
        );
    }
    // Signals are taken before anything listens, so none ends the process
    // by its default action once a client can reach it.
    let signals = Signals::new()?;
    let store = Arc::new(config.open_store().await.context("open the store")?);
    let limits = LimitsHandle::new(store, config.apply(Limits::builder()))?;
    let envoy = match args.grpc_listen {
        Some(addr) => Some(envoy::prepare(addr, &config, &limits, token.clone()).await?),
        None => None,
    };
    let mut settings = config.serve;
    settings.max_connections = connection_cap(settings.max_connections);
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listen on {}", args.listen))?;
    let store = match config.store {
        StoreKind::Memory => "memory".to_owned(),
        StoreKind::Database => format!("database {}", config.database_url),
        StoreKind::Redis => format!("redis {}", config.redis_url.as_ref().map(|u| u.redacted()).unwrap_or_default()),
    };
    tracing::info!(
        listen = %listener.local_addr()?,
        store,
        max_entries = limits.current().store_stats().map(|s| s.max_entries),
        max_connections = settings.max_connections,
        token = token.is_some(),
        "limit-store serve is listening"
    );
    let rules = envoy.as_ref().map(|e| e.reload.clone());
    tokio::spawn(reload(path, signals.hangup, config, limits.clone(), rules));
    let router = limit_store::serve::router(limits, token, envoy.as_ref().map(|e| &e.service));
    match envoy {
        None => limit_store::serve::run(listener, router, &settings, signals.terminate).await?,
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
            let http = limit_store::serve::run(listener, router, &settings, stopped(stopping.clone()));
            let grpc = limit_store::serve::run_envoy(envoy.listener, envoy.service, stopped(stopping));
            tokio::try_join!(async { http.await.context("serve HTTP") }, async { grpc.await.context("serve gRPC") })?;
        }
    }
    tracing::info!("limit-store serve stopped");
    Ok(())
}

/// The token from `--token-file`, or else from `LIMIT_STORE_API_TOKEN`,
/// trimmed (a file's last newline); a blank or short one is an error.
fn token(args: &ServeArgs) -> anyhow::Result<Option<ApiToken>> {
    let (text, from) = match (&args.token_file, &args.token) {
        (Some(path), _) => (
            SecretString::new(
                std::fs::read_to_string(path).with_context(|| format!("read the token file {}", path.display()))?,
            ),
            format!("the token file {}", path.display()),
        ),
        (None, Some(token)) => (token.clone(), "LIMIT_STORE_API_TOKEN".to_owned()),
        (None, None) => return Ok(None),
    };
    Ok(Some(ApiToken::new(text.expose().trim()).with_context(|| format!("{from} can't be the API token"))?))
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
    fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("take SIGTERM")?;
        let hangup = signal(SignalKind::hangup()).context("take SIGHUP")?;
        let terminate = Box::pin(async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        });
        Ok(Signals { terminate, hangup })
    }

    #[cfg(not(unix))]
    fn new() -> anyhow::Result<Self> {
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

/// Reloads the limits' settings from `path` on SIGHUP, or when the file
/// changes (looked at every 2 s), on the same store behind the same guard,
/// so counts, calls in flight and counters are kept. A file that can't be
/// used is refused, with its error and line, and the running settings stay.
/// Without a file, SIGHUP has nothing to reload: one line says so.
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
        if !config.same_store(&running) || at_start != (running.deadline, running.max_in_flight, running.serve) {
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

/// `serve --grpc-listen`: Envoy's rate limit service beside HTTP.
mod envoy {
    use super::*;
    use limit_store::serve::EnvoyService;

    /// The gRPC listener and service, and the rules' reload handle and path.
    pub(super) struct Envoy {
        pub(super) listener: tokio::net::TcpListener,
        pub(super) service: EnvoyService,
        pub(super) reload: (EnvoyRules, PathBuf),
    }

    /// Loads the rules of `rate_limit.envoy_config`, and listens on `addr`.
    /// The service counts in the store of `limits`, behind the same guard,
    /// so HTTP and gRPC calls share one deadline and one in-flight cap.
    pub(super) async fn prepare(
        addr: SocketAddr,
        config: &Config,
        limits: &LimitsHandle,
        token: Option<ApiToken>,
    ) -> anyhow::Result<Envoy> {
        let Some(path) = config.envoy_config.clone() else {
            anyhow::bail!(
                "--grpc-listen answers Envoy with the rules of a YAML file: set rate_limit.envoy_config in the \
                 settings (or LIMIT_STORE_ENVOY_CONFIG) to the file or the directory of them"
            );
        };
        if token.is_none() && !addr.ip().is_loopback() {
            anyhow::bail!(
                "serve answers gRPC on {addr} without a token: anyone who reaches it could spend any budget. Set \
                 LIMIT_STORE_API_TOKEN (or --token-file) to a long random string (envoy sends it as \
                 `authorization: Bearer <token>`), or use --grpc-listen 127.0.0.1:PORT"
            );
        }
        let rules = EnvoyRules::load(&path)?;
        tokio::spawn(rules.clone().watch(path.clone()));
        let store: Arc<dyn limit_store::LimitStore> = limits.store().clone();
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listen on {addr} (gRPC)"))?;
        tracing::info!(grpc_listen = %listener.local_addr()?, token = token.is_some(), "limit-store serve answers Envoy's rate limit service");
        Ok(Envoy { listener, service: EnvoyService::new(rules.clone(), store, token), reload: (rules, path) })
    }
}
