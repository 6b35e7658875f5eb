//! `limit-store demo`: the embedded default at work, end to end: the presets
//! on the memory store.

use std::sync::Arc;
use std::time::Instant;

use limit_store::{Limits, MemoryStore};

/// Options of `demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Sign-in attempts to make for one account.
    #[arg(long, default_value_t = 8)]
    attempts: u64,
    /// Then count this many `api` attempts over 50,000 clients and report the rate.
    #[arg(long, default_value_t = 200_000)]
    throughput: u64,
}

/// Makes `attempts` sign-in attempts, then measures a burst on `api`.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build()?;
    let account = ("account", "ada@example.com");
    println!("sign-in for {}: the preset's budget, on the memory store", account.1);
    for attempt in 1..=args.attempts {
        let d = limits.attempt("sign-in", &[account, ("ip", "192.0.2.7")]).await?;
        let verdict = if d.allowed { "allowed" } else { "limited" };
        let retry = d.retry_after.map(|r| format!(", retry in {} s", r.as_secs())).unwrap_or_default();
        println!("  attempt {attempt}: {verdict:7} {} left{retry}", d.remaining);
    }
    if args.throughput > 0 {
        let started = Instant::now();
        let mut allowed = 0u64;
        for i in 0..args.throughput {
            let client = format!("client-{}", i % 50_000);
            allowed += u64::from(limits.attempt("api", &[("client", &client)]).await?.allowed);
        }
        let secs = started.elapsed().as_secs_f64();
        println!(
            "api: {} attempts over 50,000 clients in {secs:.3} s ({:.0} per second, one thread), {allowed} allowed",
            args.throughput,
            args.throughput as f64 / secs
        );
    }
    Ok(())
}
