//! `migrate`, `sweep` and `stats`: the database store's chores.

use anyhow::Context;
use limit_store::{DatabaseStore, LimitStore, SecretString, SecretUrl};

/// Options of `migrate`.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The database: sqlite://PATH, postgres://… or mysql://…
    #[arg(long, env = "LIMIT_STORE_DATABASE_URL")]
    database_url: SecretUrl,
    /// The table's name.
    #[arg(long, default_value = "limit_store")]
    table: String,
}

/// Options of the commands that open a database store.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// The database: sqlite://PATH, postgres://… or mysql://…
    #[arg(long, env = "LIMIT_STORE_DATABASE_URL")]
    database_url: SecretUrl,
    /// The table's name.
    #[arg(long, default_value = "limit_store")]
    table: String,
    /// The site secret keys are hashed under (at least 32 bytes).
    #[arg(long, env = "LIMIT_STORE_SECRET", hide_env_values = true)]
    secret: SecretString,
    /// The bound on live entries, for the fill level.
    #[arg(long, default_value_t = limit_store::store::database::DEFAULT_MAX_ENTRIES)]
    max_entries: u64,
}

impl StoreArgs {
    async fn open(&self) -> anyhow::Result<DatabaseStore> {
        Ok(DatabaseStore::builder(self.database_url.expose())
            .table(&self.table)
            .secret(self.secret.expose())
            .max_entries(self.max_entries)
            .sweep_every(None)
            .connect()
            .await?)
    }
}

/// `limit-store migrate`.
pub async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    DatabaseStore::builder(args.database_url.expose()).table(&args.table).migrate().await.context("migrate")?;
    println!("the table {} is up to date", args.table);
    Ok(())
}

/// `limit-store sweep`.
pub async fn sweep(args: StoreArgs) -> anyhow::Result<()> {
    let removed = args.open().await?.sweep().await?;
    println!("removed {removed} expired entries");
    Ok(())
}

/// `limit-store stats`.
pub async fn stats(args: StoreArgs) -> anyhow::Result<()> {
    let store = args.open().await?;
    let live = store.live_entries().await?;
    let max = store.max_entries();
    println!("live entries:  {live} of {max} ({:.1}% full)", live as f64 * 100.0 / max.max(1) as f64);
    println!("generation:    {} (this secret)", store.generation());
    for (generation, n) in store.generations().await? {
        let whose = if generation == store.generation() { "this secret" } else { "another secret" };
        println!("  generation {generation}: {n} live entries ({whose})");
    }
    Ok(())
}
