//! Settings: in code ([`Config`]'s fields, or [`Limits::builder`] directly) and
//! in `limit-store.toml`, with the database and Redis URLs and the secret
//! overridable from the environment.
//!
//! ```toml
//! [rate_limit]
//! store = "database"                        # or "memory" (the default), or "redis"
//! database_url = "sqlite://limit-store.db"  # the default
//! # redis_url = "redis://127.0.0.1:6379"    # with store = "redis"
//! max_entries = 1000000                     # experimental
//! durable_commits = false                   # counts' commits wait for the disk
//! deadline = "2s"                           # a store call's deadline
//! max_in_flight = 64                        # store calls at once
//! ipv6_prefix = 64                          # IPv6 clients count per /64
//! fold_case = true                          # accounts: folded (Unicode rule)
//! # envoy_config = "ratelimit.yaml"         # serve --grpc-listen: envoy's YAML rules
//!
//! [rate_limit.limits.sign-in]
//! budget = 10          # the first part's budget (account)
//! window = "15m"
//! policy = "deny"      # when the store is unavailable: "allow" or "deny"
//! shadow = false
//!
//! [rate_limit.limits.sign-in.ip]
//! budget = 100
//!
//! [rate_limit.limits.uploads]               # a limit of the site's own: see `limits.rs`
//! parts = ["user", "ip"]
//! budget = 20                               # the first part's
//! window = "1h"
//!
//! [rate_limit.limits.uploads.ip]
//! budget = 100
//! normalize = "ip"
//!
//! [serve]                                   # limit-store serve
//! max_connections = 10000                   # open at once; past it, new ones wait
//! request_timeout = "10s"                   # for a request's head, then its body
//! shutdown_grace = "10s"                    # SIGTERM waits this long for requests in flight
//! ```
//!
//! Unknown keys and bad values are errors that name the key and its line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod file;
mod limits;
use limits::LimitSettings;
mod overrides;
mod parse;
mod serve;

use crate::limits::{LimitError, Limits, LimitsBuilder};
use crate::secret::{SecretString, SecretUrl};
use crate::{LimitStore, MemoryStore};

pub use file::read_file;
pub(crate) use overrides::OverrideSettings;
pub use serve::ServeSettings;

/// The name a settings file goes by: `limit-store serve`'s default, and the
/// origin of errors in text parsed directly.
pub(crate) const FILE: &str = "limit-store.toml";
/// Overrides `rate_limit.database_url`.
const ENV_DATABASE_URL: &str = "LIMIT_STORE_DATABASE_URL";
/// Overrides `rate_limit.redis_url`.
const ENV_REDIS_URL: &str = "LIMIT_STORE_REDIS_URL";
/// Overrides `rate_limit.secret`.
const ENV_SECRET: &str = "LIMIT_STORE_SECRET";
/// Overrides `rate_limit.envoy_config`.
const ENV_ENVOY_CONFIG: &str = "LIMIT_STORE_ENVOY_CONFIG";
/// The database URL when none is set.
const DEFAULT_DATABASE_URL: &str = "sqlite://limit-store.db";

/// Which store the limits count in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StoreKind {
    /// In this process ([`MemoryStore`]): not shared between instances.
    #[default]
    Memory,
    /// In the app's SQL database (`DatabaseStore`): shared.
    Database,
    /// In Redis or Valkey (`RedisStore`, feature `redis`): shared.
    Redis,
}

/// Every setting. `Config::default()` is what an empty file means.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// `rate_limit.store`.
    pub store: StoreKind,
    /// `rate_limit.database_url` (or `LIMIT_STORE_DATABASE_URL`).
    pub database_url: SecretUrl,
    /// `rate_limit.redis_url` (or `LIMIT_STORE_REDIS_URL`): the Redis store's
    /// server, `redis://` or `rediss://`, or its Sentinels,
    /// `redis+sentinel://host:port,.../MASTER_NAME`, or a Redis Cluster,
    /// `redis+cluster://host:port,host:port,...`.
    pub redis_url: Option<SecretUrl>,
    /// `rate_limit.redis_min_replicas_acked`: how many replicas must hold a
    /// count before it is answered (Redis `WAIT`; default 0).
    pub redis_min_replicas_acked: u32,
    /// `rate_limit.table`: the database store's table (`limit_store` when `None`).
    pub table: Option<String>,
    /// `rate_limit.single_instance`: the site runs as one instance, so the
    /// memory store loses nothing (no startup warning).
    pub single_instance: bool,
    /// `rate_limit.max_entries`, the store's bound (experimental); the store's
    /// own default when `None`.
    pub max_entries: Option<u64>,
    /// `rate_limit.durable_commits`: on PostgreSQL and SQLite, every count's
    /// commit waits for the disk (see `DatabaseStoreBuilder::durable_commits`).
    pub durable_commits: bool,
    /// `rate_limit.secret` (or `LIMIT_STORE_SECRET`): keys the database
    /// store's key hashes. Prefer the environment to the file.
    pub secret: Option<SecretString>,
    /// `rate_limit.deadline`: how long a store call may take before it is
    /// answered unavailable; 2 s when `None`, at most an hour (a longer one
    /// is taken as an hour, as [`LimitsBuilder::deadline`](crate::limits::LimitsBuilder::deadline) takes it).
    pub deadline: Option<Duration>,
    /// `rate_limit.max_in_flight`: how many store calls may run at once; 64
    /// when `None`.
    pub max_in_flight: Option<u64>,
    /// `rate_limit.ipv6_prefix`: IPv6 clients count per network of this many
    /// bits (64 when `None`; 128 counts per address).
    pub ipv6_prefix: Option<u8>,
    /// `rate_limit.fold_case`: accounts and destinations are folded by
    /// [`Normalize::Folded`](crate::limits::Normalize::Folded)'s Unicode rule (`true` when `None`).
    pub fold_case: Option<bool>,
    /// `[rate_limit.limits.NAME]`: changes to the presets, and limits of the
    /// site's own, in file order, as [`Config::apply`] puts them on a
    /// builder (in code, the builder takes them directly).
    pub(crate) limits: Vec<LimitSettings>,
    /// `rate_limit.envoy_config` (or `LIMIT_STORE_ENVOY_CONFIG`): the rules of
    /// `serve --grpc-listen`, a YAML file or a directory of them in envoy's
    /// ratelimit service format (relative to the working directory).
    pub envoy_config: Option<PathBuf>,
    /// `[serve]`: what `limit-store serve` allows its clients.
    pub serve: ServeSettings,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            store: StoreKind::Memory,
            database_url: SecretUrl::from(DEFAULT_DATABASE_URL),
            redis_url: None,
            redis_min_replicas_acked: 0,
            table: None,
            single_instance: false,
            max_entries: None,
            durable_commits: false,
            secret: None,
            deadline: None,
            max_in_flight: None,
            ipv6_prefix: None,
            fold_case: None,
            limits: Vec::new(),
            envoy_config: None,
            serve: ServeSettings::default(),
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("store", &self.store)
            .field("database_url", &self.database_url)
            .field("redis_url", &self.redis_url)
            .field("table", &self.table)
            .field("single_instance", &self.single_instance)
            .field("max_entries", &self.max_entries)
            .field("durable_commits", &self.durable_commits)
            .field("secret", &self.secret)
            .field("deadline", &self.deadline)
            .field("max_in_flight", &self.max_in_flight)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .field("fold_case", &self.fold_case)
            .field("limits", &self.limits)
            .field("envoy_config", &self.envoy_config)
            .field("serve", &self.serve)
            .finish()
    }
}

/// `text` safe to print on a terminal or in a log line: control characters
/// (an escape sequence, a line break) and invisible or reordering format
/// characters (a right-to-left override, a zero-width joiner) written as
/// `\u{..}`. A name in the settings reaches an error as it was written.
fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}')
    };
    if !text.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let escaped = |c: char| if hidden(c) { c.escape_unicode().to_string() } else { c.to_string() };
    std::borrow::Cow::Owned(text.chars().map(escaped).collect())
}

/// A settings file that can't be used: where, which key, and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}{}: {}", printable(.origin), .line.map(|l| format!(" line {l}")).unwrap_or_default(), .key.as_ref().map(|k| format!(", `{}`", printable(k))).unwrap_or_default(), printable(.message))]
pub struct ConfigError {
    /// The file (or `limit-store.toml` for text parsed directly).
    pub origin: String,
    /// The line of the key, counting from 1.
    pub line: Option<usize>,
    /// The full key, as `rate_limit.limits.sign-in.budget`.
    pub key: Option<String>,
    /// What is wrong and what is expected.
    pub message: String,
}

impl Config {
    /// Reads `path` ([`read_file`]) and applies the environment overrides
    /// ([`Config::apply_env`]).
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let origin = path.display().to_string();
        let text = read_file(path)?;
        let mut config = Config::parse(&text).map_err(|e| ConfigError { origin, ..e })?;
        config.apply_env(|var| std::env::var(var).ok())?;
        Ok(config)
    }

    /// Parses the text of a settings file (no environment overrides).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        parse::Parser::new(text).config()
    }

    /// Applies the overrides `var` finds (`LIMIT_STORE_DATABASE_URL`,
    /// `LIMIT_STORE_REDIS_URL`, `LIMIT_STORE_SECRET`, `LIMIT_STORE_ENVOY_CONFIG`,
    /// and `[serve]`'s `LIMIT_STORE_MAX_CONNECTIONS`, `LIMIT_STORE_REQUEST_TIMEOUT`,
    /// `LIMIT_STORE_SHUTDOWN_GRACE`); [`Config::load`] reads them from the
    /// process. A value that does not parse is an error that names the variable.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        if let Some(url) = var(ENV_DATABASE_URL).filter(|v| !v.is_empty()) {
            self.database_url = SecretUrl::from(url);
        }
        if let Some(url) = var(ENV_REDIS_URL).filter(|v| !v.is_empty()) {
            self.redis_url = Some(SecretUrl::from(url));
        }
        if let Some(secret) = var(ENV_SECRET).filter(|v| !v.is_empty()) {
            self.secret = Some(SecretString::from(secret));
        }
        if let Some(path) = var(ENV_ENVOY_CONFIG).filter(|v| !v.is_empty()) {
            self.envoy_config = Some(PathBuf::from(path));
        }
        self.serve.apply_env(var)
    }

    /// Puts the limit settings (and `single_instance`, the deadline and the
    /// in-flight cap) on `builder`.
    pub fn apply(&self, mut builder: LimitsBuilder) -> LimitsBuilder {
        builder = builder.single_instance(self.single_instance);
        if let Some(deadline) = self.deadline {
            builder = builder.deadline(deadline);
        }
        if let Some(n) = self.max_in_flight {
            builder = builder.max_in_flight(usize::try_from(n).unwrap_or(usize::MAX));
        }
        if let Some(bits) = self.ipv6_prefix {
            builder = builder.ipv6_prefix(bits);
        }
        if let Some(fold) = self.fold_case {
            builder = builder.fold_case(fold);
        }
        for limit in &self.limits {
            if let Some(defined) = &limit.defines {
                builder = builder.limit(defined.clone());
            }
            if let Some(policy) = limit.policy {
                builder = builder.policy(&limit.name, policy);
            }
            if let Some(shadow) = limit.shadow {
                builder = builder.shadow(&limit.name, shadow);
            }
            for part in &limit.parts {
                if let Some(budget) = part.budget {
                    builder = builder.budget(&limit.name, &part.name, budget);
                }
                if let Some(window) = part.window {
                    builder = builder.window(&limit.name, &part.name, window);
                }
                for o in &part.overrides {
                    builder = builder.value_override(&limit.name, &part.name, &o.value, o.budget, o.window);
                }
            }
        }
        builder
    }

    /// Opens the configured store (the database store needs its table:
    /// `limit-store migrate`) and builds the limits on it.
    pub async fn build_limits(&self) -> Result<Limits, LimitError> {
        let store = self.open_store().await?;
        self.apply(Limits::builder().store(Arc::new(store))).build()
    }

    /// Opens the configured store behind the guard these settings give it
    /// (`deadline`, `max_in_flight`), to build limits on it with
    /// [`Config::apply`]: a service guards its store once, and builds every
    /// reload's limits on that guard, keeping its counts (see
    /// [`LimitsBuilder::counters_from`]).
    pub async fn open_store(&self) -> Result<crate::Guarded, LimitError> {
        let store: Arc<dyn LimitStore> = match self.store {
            StoreKind::Memory => Arc::new(match self.max_entries {
                Some(n) => MemoryStore::with_max_entries(n),
                None => MemoryStore::new(),
            }),
            StoreKind::Database => self.database().await?,
            StoreKind::Redis => self.redis().await?,
        };
        Ok(crate::Guarded::with_limits(
            store,
            self.deadline.unwrap_or(crate::guard::DEFAULT_DEADLINE),
            self.max_in_flight
                .map_or(crate::guard::DEFAULT_MAX_IN_FLIGHT, |n| usize::try_from(n).unwrap_or(usize::MAX)),
        ))
    }

    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    async fn database(&self) -> Result<Arc<dyn LimitStore>, LimitError> {
        let mut builder = crate::DatabaseStore::builder(self.database_url.expose());
        if let Some(table) = &self.table {
            builder = builder.table(table);
        }
        if let Some(secret) = &self.secret {
            builder = builder.secret(secret.expose());
        }
        if let Some(n) = self.max_entries {
            builder = builder.max_entries(n);
        }
        Ok(Arc::new(builder.durable_commits(self.durable_commits).connect().await?))
    }

    #[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
    async fn database(&self) -> Result<Arc<dyn LimitStore>, LimitError> {
        Err(crate::StoreError::setup(
            "rate_limit.store = \"database\" needs limit-store built with a database feature (sqlite, postgres or mysql)",
        )
        .into())
    }

    #[cfg(feature = "redis")]
    async fn redis(&self) -> Result<Arc<dyn LimitStore>, LimitError> {
        let Some(url) = &self.redis_url else {
            return Err(crate::StoreError::setup(format!(
                "rate_limit.store = \"redis\" needs the server: set rate_limit.redis_url or {ENV_REDIS_URL} \
                 (redis://host:6379, or rediss:// for TLS)"
            ))
            .into());
        };
        let mut builder = crate::RedisStore::builder(url.expose()).min_replicas_acked(self.redis_min_replicas_acked);
        if let Some(secret) = &self.secret {
            builder = builder.secret(secret.expose());
        }
        if let Some(n) = self.max_entries {
            builder = builder.max_entries(n);
        }
        Ok(Arc::new(builder.connect().await?))
    }

    #[cfg(not(feature = "redis"))]
    async fn redis(&self) -> Result<Arc<dyn LimitStore>, LimitError> {
        Err(crate::StoreError::setup("rate_limit.store = \"redis\" needs limit-store built with the redis feature")
            .into())
    }
}
