//! `limit-store demo`: the embedded default at work, end to end.

use std::sync::Arc;
use std::time::Instant;

use limit_store::{update_with, Entry, Guarded, LimitStore, MemoryStore, Write};
use serde_json::json;

/// Options of `demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Attempts to make for one account.
    #[arg(long, default_value_t = 8)]
    attempts: u64,
    /// Attempts allowed per window.
    #[arg(long, default_value_t = 5)]
    budget: u64,
    /// The window, in seconds.
    #[arg(long, default_value_t = 900)]
    window: i64,
    /// Then count this many attempts on distinct keys and report the rate.
    #[arg(long, default_value_t = 200_000)]
    throughput: u64,
}

/// Counts `attempts` sign-ins in a fixed window, then measures a burst.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let store: Arc<dyn LimitStore> = Arc::new(Guarded::new(Arc::new(MemoryStore::new())));
    let key = "sign-in:account:ada@example.com";
    println!("sign-in for {key}: {} per {} s, on the memory store", args.budget, args.window);
    for attempt in 1..=args.attempts {
        let (allowed, count, reset_at, now) = count_attempt(&*store, key, args.budget, args.window * 1_000).await?;
        let verdict = if allowed { "allowed" } else { "limited" };
        println!(
            "  attempt {attempt}: {verdict:7} count {count}/{} resets in {} s",
            args.budget,
            (reset_at - now) / 1_000
        );
    }
    if args.throughput > 0 {
        let started = Instant::now();
        for i in 0..args.throughput {
            let key = format!("api:client:{}", i % 50_000);
            count_attempt(&*store, &key, u64::MAX, 60_000).await?;
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "counted {} attempts on 50,000 keys in {secs:.3} s ({:.0} per second, one thread, guarded)",
            args.throughput,
            args.throughput as f64 / secs
        );
    }
    Ok(())
}

/// One fixed-window attempt: counted only when the budget allows it.
async fn count_attempt(
    store: &dyn LimitStore,
    key: &str,
    budget: u64,
    window_ms: i64,
) -> anyhow::Result<(bool, u64, i64, i64)> {
    Ok(update_with(store, &[key], |current, now| {
        let (count, reset_at) =
            current[0].as_ref().map_or((0, now + window_ms), |e| (e.value["n"].as_u64().unwrap_or(0), e.expires_at));
        if count >= budget {
            return (vec![Write::Keep], (false, count, reset_at, now));
        }
        let entry = Entry { value: json!({ "n": count + 1 }), expires_at: reset_at };
        (vec![Write::Put(entry)], (true, count + 1, reset_at, now))
    })
    .await?)
}
