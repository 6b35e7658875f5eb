//! The `[serve]` settings: what `limit-store serve` allows a client (how long
//! it may take to send a request, how many connections it may hold) and how
//! long SIGTERM waits for the requests in flight.

use std::time::Duration;

use super::parse::parse_duration;
use super::ConfigError;

/// Overrides `serve.max_connections`.
const ENV_MAX_CONNECTIONS: &str = "LIMIT_STORE_MAX_CONNECTIONS";
/// Overrides `serve.request_timeout`.
const ENV_REQUEST_TIMEOUT: &str = "LIMIT_STORE_REQUEST_TIMEOUT";
/// Overrides `serve.shutdown_grace`.
const ENV_SHUTDOWN_GRACE: &str = "LIMIT_STORE_SHUTDOWN_GRACE";

/// The settings of `limit-store serve`. `ServeSettings::default()` is what an
/// absent `[serve]` table means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServeSettings {
    /// `serve.max_connections`: connections open at once, on the HTTP and
    /// gRPC ports together; past it, new ones wait. 10,000 by default
    /// (lowered at start to what the process's open-file limit allows).
    pub max_connections: usize,
    /// `serve.request_timeout`: a request's head must arrive within it, and
    /// then its body within it again; otherwise the connection is closed (with
    /// a 408 when part of the request came). An idle connection is closed
    /// after it too (on the gRPC port: pinged, and closed if the ping is not
    /// answered within it again), and a gRPC call not answered within it ends.
    /// 10 s by default.
    pub request_timeout: Duration,
    /// `serve.shutdown_grace`: after SIGTERM, how long the requests in flight
    /// may take to finish before `serve` exits anyway. 10 s by default.
    pub shutdown_grace: Duration,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            max_connections: 10_000,
            request_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServeSettings {
    /// Applies the overrides `var` finds (`LIMIT_STORE_MAX_CONNECTIONS`,
    /// `LIMIT_STORE_REQUEST_TIMEOUT`, `LIMIT_STORE_SHUTDOWN_GRACE`), for
    /// [`Config::apply_env`](super::Config::apply_env); a value that does not
    /// parse is an error that names the variable.
    pub(crate) fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(text) = set(ENV_MAX_CONNECTIONS) {
            self.max_connections = text
                .trim()
                .parse()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| env_error(ENV_MAX_CONNECTIONS, &text, "a whole number of at least 1"))?;
        }
        for (name, field) in
            [(ENV_REQUEST_TIMEOUT, &mut self.request_timeout), (ENV_SHUTDOWN_GRACE, &mut self.shutdown_grace)]
        {
            if let Some(text) = set(name) {
                *field = parse_duration(text.trim()).ok_or_else(|| {
                    env_error(name, &text, "a whole number and a unit, as \"500ms\", \"10s\" or \"1m\"")
                })?;
            }
        }
        Ok(())
    }
}

fn env_error(name: &str, text: &str, expected: &str) -> ConfigError {
    ConfigError {
        origin: "the environment".to_owned(),
        line: None,
        key: Some(name.to_owned()),
        message: format!("`{text}` is not {expected}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_10_s_10_000_connections_and_10_s() {
        let settings = ServeSettings::default();
        assert_eq!(settings.request_timeout, Duration::from_secs(10));
        assert_eq!(settings.max_connections, 10_000);
        assert_eq!(settings.shutdown_grace, Duration::from_secs(10));
        assert_eq!(super::super::Config::default().serve, settings, "an empty file means the defaults");
        let parsed = super::super::Config::parse("[rate_limit]\nsingle_instance = true\n").unwrap();
        assert_eq!(parsed.serve, settings);
    }

    #[test]
    fn the_file_and_the_environment_set_them() {
        let mut config = super::super::Config::parse(
            "[serve]\nmax_connections = 300\nrequest_timeout = \"2s\"\nshutdown_grace = \"500ms\"\n",
        )
        .unwrap();
        assert_eq!(
            config.serve,
            ServeSettings {
                max_connections: 300,
                request_timeout: Duration::from_secs(2),
                shutdown_grace: Duration::from_millis(500),
            }
        );
        config
            .serve
            .apply_env(|var| match var {
                ENV_MAX_CONNECTIONS => Some("40".into()),
                ENV_SHUTDOWN_GRACE => Some("1m".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!((config.serve.max_connections, config.serve.shutdown_grace), (40, Duration::from_secs(60)));
        assert_eq!(config.serve.request_timeout, Duration::from_secs(2), "unset stays");
    }

    #[test]
    fn bad_values_name_their_key_or_variable() {
        let e = super::super::Config::parse("[serve]\nmax_connections = 0\n").unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(2), Some("serve.max_connections")), "{e}");
        let e = super::super::Config::parse("[serve]\nrequest_timeout = \"soon\"\n").unwrap_err();
        assert_eq!(e.key.as_deref(), Some("serve.request_timeout"), "{e}");
        let e = super::super::Config::parse("[serve]\nlisten = \"0.0.0.0:80\"\n").unwrap_err();
        assert!(e.to_string().contains("max_connections, request_timeout, shutdown_grace"), "{e}");
        let e = ServeSettings::default().apply_env(|var| (var == ENV_SHUTDOWN_GRACE).then(|| "ten".into()));
        let e = e.unwrap_err().to_string();
        assert!(e.contains(ENV_SHUTDOWN_GRACE) && e.contains("ten"), "{e}");
        let e = ServeSettings::default().apply_env(|var| (var == ENV_MAX_CONNECTIONS).then(|| "-1".into()));
        assert!(e.unwrap_err().to_string().contains(ENV_MAX_CONNECTIONS));
    }
}
