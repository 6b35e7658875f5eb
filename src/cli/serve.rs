//! `limit-store serve`: the HTTP service, on the limits of `limit-store.toml`
//! (the presets on the memory store without one).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use limit_store::config::StoreKind;
use limit_store::SecretString;

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
}

/// Loads the settings, builds the limits, and serves until SIGTERM or Ctrl-C.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = super::settings(args.config.as_deref())?;
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
    let limits = config.build_limits().await.context("open the store")?;
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("listen on {}", args.listen))?;
    let store = match config.store {
        StoreKind::Memory => "memory".to_owned(),
        StoreKind::Database => format!("database {}", config.database_url),
    };
    tracing::info!(
        listen = %listener.local_addr()?,
        store,
        max_entries = config.max_entries,
        token = token.is_some(),
        "limit-store serve is listening"
    );
    let router = limit_store::serve::router(limits, token);
    limit_store::serve::run(listener, router, shutdown()).await?;
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
