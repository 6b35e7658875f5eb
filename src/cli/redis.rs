//! `sweep` and `stats` on the Redis store, when the settings say
//! `store = "redis"` or `--redis-url` is given.

use anyhow::Context;

use limit_store::{LimitStore, RedisStore, SecretUrl};

/// Opens the Redis store at `url` for a chore: no background counting.
pub async fn open(url: &SecretUrl, secret: Option<&str>, max_entries: Option<u64>) -> anyhow::Result<RedisStore> {
    let mut builder = RedisStore::builder(url.expose()).sweep_every(None);
    // Without a secret the store says one is needed, and where to set it.
    if let Some(secret) = secret {
        builder = builder.secret(secret);
    }
    if let Some(n) = max_entries {
        builder = builder.max_entries(n);
    }
    builder.connect().await.with_context(|| format!("open the Redis store at {url}"))
}

/// `limit-store sweep` on Redis: says whether anything was left to remove.
pub async fn sweep(store: RedisStore) -> anyhow::Result<()> {
    let removed = store.sweep().await?;
    if removed == 0 {
        println!("removed 0 entries: no expired entry was left (Redis drops expired entries itself)");
    } else {
        println!("removed {removed} expired entries that Redis still held in their grace (it drops the rest itself)");
    }
    Ok(())
}

/// `limit-store stats` on Redis.
pub async fn stats(store: RedisStore) -> anyhow::Result<()> {
    let info = store.info().await?;
    let (live, max) = (info.live_entries, store.stats().map_or(0, |s| s.max_entries));
    println!("live entries:  {live} of {max} ({:.1}% full)", live as f64 * 100.0 / max.max(1) as f64);
    println!("generation:    {} (this secret; keys {}…)", info.generation, info.key_prefix);
    if info.evicts {
        println!(
            "WARNING:       maxmemory-policy is {}: Redis may evict limit entries and silently drop a lockout; \
             use maxmemory-policy noeviction on an instance of the store's own",
            info.eviction_policy
        );
    } else {
        println!("eviction:      {} (entries are never evicted)", info.eviction_policy);
    }
    Ok(())
}
