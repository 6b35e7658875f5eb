//! `limit-store serve`: the HTTP service, on the limits of `limit-store.toml`
//! (the presets on the memory store without one).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::serve::ApiToken;
use anyhow::Context;
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
    /// Also answer Envoy's rate limit service (gRPC) here, with the rules of
    /// rate_limit.envoy_config. Anything but loopback needs a token.
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
}

/// Loads the settings and serves them until SIGTERM or Ctrl-C
/// ([`crate::serve::run`]).
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let path = args.config.clone().or_else(|| {
        let default = PathBuf::from(super::SETTINGS_FILE);
        default.exists().then_some(default)
    });
    let mut config = super::settings(path.as_deref())?;
    if path.is_none() {
        // No settings: the presets on the memory store of this one process.
        config.single_instance = true;
    }
    let token = token(&args)?;
    crate::serve::run(config, path, args.listen, args.grpc_listen, token).await.map_err(|e| anyhow::anyhow!(e))
}

/// The token from `--token-file`, or else from `LIMIT_STORE_API_TOKEN`,
/// trimmed (a file's last newline); a blank or short one is an error.
fn token(args: &ServeArgs) -> anyhow::Result<Option<ApiToken>> {
    let (text, from) = match (&args.token_file, &args.token) {
        (Some(path), _) => (
            SecretString::from(
                std::fs::read_to_string(path).with_context(|| format!("read the token file {}", path.display()))?,
            ),
            format!("the token file {}", path.display()),
        ),
        (None, Some(token)) => (token.clone(), "LIMIT_STORE_API_TOKEN".to_owned()),
        (None, None) => return Ok(None),
    };
    Ok(Some(ApiToken::new(text.expose().trim()).with_context(|| format!("{from} can't be the API token"))?))
}
