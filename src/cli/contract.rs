//! `limit-store contract STORE_URL`: the contract suite against a real store,
//! with two handles as two instances hold it; non-zero exit on a violation.

use std::sync::Arc;
use std::time::Instant;

use limit_store::testing::{contract, StorePair};
use limit_store::{DatabaseStore, MemoryStore, RedisStore, SecretString, SecretUrl};

/// Options of `contract`.
#[derive(Debug, clap::Args)]
pub struct ContractArgs {
    /// `memory`, a database URL (sqlite://PATH, postgres://…, mysql://…) or
    /// a Redis URL (redis://…, rediss://…, redis+sentinel://…/MASTER_NAME, redis+cluster://…)
    store_url: SecretUrl,
    /// The table to run against (created if missing); cases use random keys,
    /// so a table holding other data is fine.
    #[arg(long, default_value = "limit_store")]
    table: String,
    /// The secret for the two handles (any 32 bytes; a run's own by default).
    #[arg(long, env = "LIMIT_STORE_SECRET", hide_env_values = true)]
    secret: Option<SecretString>,
}

async fn pair(args: &ContractArgs) -> anyhow::Result<StorePair> {
    let url = args.store_url.expose();
    if url == "memory" {
        let store = MemoryStore::new();
        return Ok(StorePair { first: Arc::new(store.clone()), second: Arc::new(store) });
    }
    // An empty LIMIT_STORE_SECRET is no secret given, as every variable's.
    let given = args.secret.clone().filter(|s| !s.expose().is_empty());
    let secret = given.unwrap_or_else(|| "limit-store contract run: not a site secret".into());
    if ["redis://", "rediss://", "redis+sentinel://", "rediss+sentinel://", "redis+cluster://", "rediss+cluster://"]
        .iter()
        .any(|s| url.starts_with(s))
    {
        let open = || async { RedisStore::builder(url).secret(secret.expose()).sweep_every(None).connect().await };
        return Ok(StorePair { first: Arc::new(open().await?), second: Arc::new(open().await?) });
    }
    DatabaseStore::builder(url).table(&args.table).migrate().await?;
    let open = || async {
        DatabaseStore::builder(url).table(&args.table).secret(secret.expose()).sweep_every(None).connect().await
    };
    Ok(StorePair { first: Arc::new(open().await?), second: Arc::new(open().await?) })
}

/// Runs every case, each on a fresh pair, and reports them one per line.
pub async fn run(args: ContractArgs) -> anyhow::Result<()> {
    let (mut passed, mut failed) = (0, 0);
    for case in contract() {
        let started = Instant::now();
        let outcome = case.run(pair(&args).await?).await;
        let ms = started.elapsed().as_millis();
        match outcome {
            Ok(()) => {
                passed += 1;
                println!("ok      {} ({ms} ms)", case.name());
            }
            Err(violation) => {
                failed += 1;
                println!("FAILED  {} ({ms} ms)\n{violation}", case.name());
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        anyhow::bail!("{failed} contract case(s) failed on {}", args.store_url);
    }
    Ok(())
}
