//! `migrate`, `sweep` and `stats`: the database store's upkeep (`sweep` and
//! `stats` run on the Redis store when the settings choose it).

use anyhow::Context;
use std::path::PathBuf;

use limit_store::config::{Config, StoreKind};
use limit_store::{DatabaseStore, LimitStore, SecretString, SecretUrl};

/// Where the database is: the settings (file, then environment), then
/// these flags.
#[derive(Debug, clap::Args)]
pub struct DatabaseArgs {
    /// The settings file (default: ./limit-store.toml when it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// The database: sqlite://PATH, postgres://… or mysql://… (overrides the
    /// settings and LIMIT_STORE_DATABASE_URL).
    #[arg(long)]
    database_url: Option<SecretUrl>,
    /// The table's name (overrides the settings).
    #[arg(long)]
    table: Option<String>,
}

impl DatabaseArgs {
    /// The settings, with the flags' URL and table when given.
    fn settings(&self) -> anyhow::Result<Config> {
        let mut config = super::settings(self.config.as_deref())?;
        if let Some(url) = &self.database_url {
            config.database_url = url.clone();
        }
        if let Some(table) = &self.table {
            config.table = Some(table.clone());
        }
        Ok(config)
    }
}

/// Options of `migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    database: DatabaseArgs,
}

/// Options of the commands that open a database store.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    #[command(flatten)]
    database: DatabaseArgs,
    /// The site secret keys are hashed under (at least 32 bytes).
    #[arg(long, env = "LIMIT_STORE_SECRET", hide_env_values = true)]
    secret: Option<SecretString>,
    /// The bound on live entries, for the fill level.
    #[arg(long)]
    max_entries: Option<u64>,
    /// Run on the Redis store at this URL instead (redis://, rediss://, redis+sentinel:// or redis+cluster://;
    /// also `store = "redis"` with `redis_url` in the settings, or
    /// LIMIT_STORE_REDIS_URL).
    #[arg(long, conflicts_with = "database_url")]
    redis_url: Option<SecretUrl>,
}

fn table(config: &Config) -> &str {
    config.table.as_deref().unwrap_or(limit_store::store::database::DEFAULT_TABLE)
}

impl StoreArgs {
    fn config(&self) -> anyhow::Result<Config> {
        let mut config = self.database.settings()?;
        // An empty LIMIT_STORE_SECRET is no secret given (the settings' stands).
        if let Some(secret) = self.secret.as_ref().filter(|s| !s.expose().is_empty()) {
            config.secret = Some(secret.clone());
        }
        if let Some(url) = &self.redis_url {
            config.store = StoreKind::Redis;
            config.redis_url = Some(url.clone());
        }
        Ok(config)
    }

    /// The Redis store, when the settings or the flags choose it.
    async fn redis(&self) -> anyhow::Result<Option<limit_store::RedisStore>> {
        let config = self.config()?;
        if config.store != StoreKind::Redis {
            return Ok(None);
        }
        let url = config.redis_url.as_ref().context(
            "store = \"redis\" needs the server: set redis_url in the settings, LIMIT_STORE_REDIS_URL or --redis-url",
        )?;
        let secret = config.secret.as_ref().map(|s| s.expose());
        Ok(Some(super::redis::open(url, secret, self.max_entries.or(config.max_entries)).await?))
    }

    async fn open(&self) -> anyhow::Result<DatabaseStore> {
        let config = self.config()?;
        // Settings that count in memory count in the serve process: no URL of
        // theirs is that store (a `database_url` beside `store = "memory"`
        // is not used by serve), so only a URL given here is opened.
        if config.store == StoreKind::Memory && self.database.database_url.is_none() {
            anyhow::bail!(
                "the settings count in memory (rate_limit.store = \"memory\", the default), in the serve process \
                 alone: its /metrics and status page show that store. For a database or Redis store, set \
                 rate_limit.store in limit-store.toml, or give --database-url or --redis-url"
            );
        }
        let mut builder = DatabaseStore::builder(config.database_url.expose()).table(table(&config));
        // Without a secret the store says one is needed, and where to set it.
        if let Some(secret) = &config.secret {
            builder = builder.secret(secret.expose());
        }
        if let Some(n) = self.max_entries.or(config.max_entries) {
            builder = builder.max_entries(n);
        }
        builder
            .sweep_every(None)
            .connect()
            .await
            .with_context(|| format!("open the database store at {}", config.database_url))
    }
}

/// `limit-store migrate`.
pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    let config = args.database.settings()?;
    // As stats and sweep: only a database the settings count in, or one
    // named here, is migrated; settings that count elsewhere make no file.
    if args.database.database_url.is_none() {
        match config.store {
            StoreKind::Memory => anyhow::bail!(
                "the settings count in memory (rate_limit.store = \"memory\", the default): there is no table to \
                 make. For the database store, set rate_limit.store = \"database\" (and database_url) in \
                 limit-store.toml, or give --database-url"
            ),
            StoreKind::Redis => {
                anyhow::bail!(
                    "the settings count in Redis, which needs no table: give --database-url to migrate a database"
                )
            }
            StoreKind::Database => {}
        }
    }
    DatabaseStore::builder(config.database_url.expose()).table(table(&config)).migrate().await.context("migrate")?;
    println!("the table {} is ready: made, or brought up to date", table(&config));
    Ok(())
}

/// `limit-store sweep`.
pub async fn sweep(args: StoreArgs) -> anyhow::Result<()> {
    if let Some(store) = args.redis().await? {
        return super::redis::sweep(store).await;
    }
    let removed = args.open().await?.sweep().await?;
    println!("removed {removed} expired entries");
    Ok(())
}

/// `limit-store stats`.
pub async fn stats(args: StoreArgs) -> anyhow::Result<()> {
    if let Some(store) = args.redis().await? {
        return super::redis::stats(store).await;
    }
    let store = args.open().await?;
    let info = store.info().await?;
    let (live, max) = (info.live_entries, store.stats().map_or(0, |s| s.max_entries));
    println!("live entries:  {live} of {max} ({:.1}% full)", live as f64 * 100.0 / max.max(1) as f64);
    println!("generation:    {} (this secret)", info.generation);
    for (generation, n) in info.generations {
        let whose = if generation == info.generation { "this secret" } else { "another secret" };
        println!("  generation {generation}: {n} live entries ({whose})");
    }
    Ok(())
}
