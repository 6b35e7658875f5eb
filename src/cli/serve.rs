//! `limit-store serve`: the HTTP service, on the limits of `limit-store.toml`
//! (the presets on the memory store without one).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use limit_store::config::{Config, StoreKind};
use limit_store::serve::envoy::EnvoyRules;
use limit_store::serve::LimitsHandle;
use limit_store::{LimitStore, Limits, SecretString};

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
    let token = match &args.token_file {
        Some(path) => Some(SecretString::new(
            std::fs::read_to_string(path).with_context(|| format!("read the token file {}", path.display()))?.trim(),
        )),
        None => args.token.clone().filter(|t| !t.expose().is_empty()),
    };
    if token.is_none() && !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "serve listens on {} without a token: anyone who reaches it could clear a lockout. Set \
             LIMIT_STORE_API_TOKEN (or --token-file) to a long random string, or listen on 127.0.0.1",
            args.listen
        );
    }
    let store = config.open_store().await.context("open the store")?;
    let limits = config.apply(Limits::builder().store(store.clone())).build()?;
    let limits = LimitsHandle::new(limits);
    let envoy = match args.grpc_listen {
        Some(addr) => Some(envoy::prepare(addr, &config, &store, token.clone()).await?),
        None => None,
    };
    if let Some(path) = path {
        let rules = envoy.as_ref().map(|e| e.reload.clone());
        tokio::spawn(reload(path, config.clone(), store, limits.clone(), rules));
    }
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
        token = token.is_some(),
        "limit-store serve is listening"
    );
    let mut metrics = limit_store::serve::metrics::Metrics::new();
    if let Some(envoy) = &envoy {
        envoy.service.metrics().register(metrics.registry_mut());
    }
    let router = limit_store::serve::router_with_metrics(limits, token, metrics);
    let (stop, stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown().await;
        let _ = stop.send(true);
    });
    let stopped = |mut stopping: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopping.wait_for(|&stop| stop).await;
    };
    let http = limit_store::serve::run(listener, router, stopped(stopping.clone()));
    match envoy {
        Some(envoy) => {
            let grpc = limit_store::serve::envoy::serve(envoy.listener, envoy.service, stopped(stopping));
            tokio::try_join!(async { http.await.context("serve HTTP") }, async { grpc.await.context("serve gRPC") })?;
        }
        None => http.await?,
    }
    tracing::info!("limit-store serve stopped: the requests in flight were answered");
    Ok(())
}

/// Resolves at SIGTERM or Ctrl-C.
async fn shutdown() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

/// Reloads the limits' settings from `path` on SIGHUP, or when the file
/// changes (looked at every 2 s), on the same store, so counts are kept. A
/// file that can't be used is refused, with its error and line, and the
/// running settings stay.
async fn reload(
    path: PathBuf,
    mut running: Config,
    store: Arc<dyn LimitStore>,
    limits: LimitsHandle,
    envoy: Option<(EnvoyRules, PathBuf)>,
) {
    let modified = |path: &PathBuf| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let mut seen: Option<SystemTime> = modified(&path);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        #[cfg(unix)]
        let hup = async {
            match hangup.as_mut() {
                Some(h) => drop(h.recv().await),
                None => std::future::pending().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<()>();
        tokio::select! {
            () = hup => {}
            () = tokio::time::sleep(Duration::from_secs(2)) => {
                let now = modified(&path);
                if now == seen {
                    continue;
                }
            }
        }
        seen = modified(&path);
        if let Some((rules, yaml)) = &envoy {
            rules.reload_logged(yaml);
        }
        let config = match Config::load(&path) {
            Ok(config) => config,
            Err(e) => {
                tracing::error!(kind = "limit-store-config-refused", error = %e, "the changed settings were refused; the running ones stay");
                continue;
            }
        };
        if !config.same_store(&running) {
            tracing::warn!(
                kind = "limit-store-config-restart",
                "the store's settings changed: they apply at the next start; the limits' settings apply now"
            );
        }
        match config.apply(Limits::builder().store(store.clone())).build() {
            Ok(built) => {
                limits.replace(built);
                running = config;
                tracing::info!(
                    kind = "limit-store-config-reloaded",
                    "reloaded the limits' settings; the counts are kept"
                );
            }
            Err(e) => {
                tracing::error!(kind = "limit-store-config-refused", error = %e, "the changed settings were refused; the running ones stay")
            }
        }
    }
}

/// `serve --grpc-listen`: Envoy's rate limit service beside HTTP.
mod envoy {
    use super::*;
    use limit_store::serve::envoy::EnvoyService;
    use limit_store::Guarded;

    /// The gRPC listener and service, and the rules' reload handle and path.
    pub(super) struct Envoy {
        pub(super) listener: tokio::net::TcpListener,
        pub(super) service: EnvoyService,
        pub(super) reload: (EnvoyRules, PathBuf),
    }

    /// Loads the rules of `rate_limit.envoy_config`, and listens on `addr`.
    /// The service counts in `store` behind a guard of the same deadline and
    /// in-flight cap as the HTTP limits'.
    pub(super) async fn prepare(
        addr: SocketAddr,
        config: &Config,
        store: &Arc<dyn LimitStore>,
        token: Option<SecretString>,
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
        tracing::info!(
            config = %path.display(),
            domains = ?rules.current().domains(),
            rules = rules.current().len(),
            "loaded the Envoy rules"
        );
        tokio::spawn(rules.clone().watch(path.clone()));
        let guarded: Arc<dyn LimitStore> = Arc::new(Guarded::with_limits(
            store.clone(),
            config.deadline.unwrap_or(limit_store::guard::DEFAULT_DEADLINE),
            config
                .max_in_flight
                .map_or(limit_store::guard::DEFAULT_MAX_IN_FLIGHT, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        ));
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("listen on {addr} (gRPC)"))?;
        tracing::info!(grpc_listen = %listener.local_addr()?, token = token.is_some(), "limit-store serve answers Envoy's rate limit service");
        Ok(Envoy { listener, service: EnvoyService::new(rules.clone(), guarded, token), reload: (rules, path) })
    }
}
