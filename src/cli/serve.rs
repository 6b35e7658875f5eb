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
    #[arg(long, default_value = "127.0.0.1:8080", value_parser = listen_address)]
    listen: SocketAddr,
    /// A file holding the API token (instead of LIMIT_STORE_API_TOKEN).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// The API token callers send as `Authorization: Bearer <token>`.
    #[arg(long = "token", env = "LIMIT_STORE_API_TOKEN", hide_env_values = true, hide = true)]
    token: Option<SecretString>,
    /// The site secret keys are hashed under (at least 32 bytes), for the
    /// database and Redis stores; also LIMIT_STORE_SECRET or rate_limit.secret,
    /// which other users on the host can't read in the process list as they
    /// can a flag.
    #[arg(long, env = "LIMIT_STORE_SECRET", hide_env_values = true)]
    secret: Option<SecretString>,
    /// Also answer Envoy's rate limit service (gRPC) here, with the rules of
    /// rate_limit.envoy_config. Anything but loopback needs a token.
    #[arg(long, value_parser = listen_address)]
    grpc_listen: Option<SocketAddr>,
}

/// An address to listen on: an IP address and a port, or `localhost:PORT`
/// (127.0.0.1; names are not looked up, so none can point elsewhere).
fn listen_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let port = text.strip_prefix("localhost:").and_then(|port| port.parse::<u16>().ok());
    port.map(|port| SocketAddr::from(([127, 0, 0, 1], port))).ok_or_else(|| {
        format!(
            "`{text}` is not an address to listen on: give an IP address and a port (127.0.0.1:8080, \
             [::1]:8080; 0.0.0.0:8080 with a token) or localhost:PORT"
        )
    })
}

/// Loads the settings and serves them until SIGTERM or Ctrl-C
/// ([`crate::serve::run`]).
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let path = args.config.clone().or_else(|| {
        let default = PathBuf::from(super::SETTINGS_FILE);
        default.exists().then_some(default)
    });
    // Without settings, the presets on the memory store; the start warns
    // (`limit-store-not-shared`) that each process counts alone, as any
    // memory store not said to be a single instance does.
    let mut config = super::settings(path.as_deref())?;
    // An empty LIMIT_STORE_SECRET is no secret given (the settings' stands).
    if let Some(secret) = args.secret.as_ref().filter(|s| !s.expose().is_empty()) {
        config.secret = Some(secret.clone());
    }
    let token = token(&args)?;
    crate::serve::run(config, path, args.listen, args.grpc_listen, token).await.map_err(anyhow::Error::from_boxed)
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

#[cfg(test)]
mod tests {
    use super::listen_address;

    #[test]
    fn an_address_is_an_ip_and_a_port_or_localhost_and_a_port() {
        assert_eq!(listen_address("127.0.0.1:8080").unwrap().to_string(), "127.0.0.1:8080");
        assert_eq!(listen_address("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert_eq!(listen_address("localhost:8081").unwrap().to_string(), "127.0.0.1:8081");
        for bad in ["localhost", "localhost:", "localhost:99999", "example.com:80", "8080", ""] {
            let error = listen_address(bad).unwrap_err();
            assert!(error.contains("localhost:PORT") && error.contains("127.0.0.1:8080"), "{bad}: {error}");
        }
    }
}
