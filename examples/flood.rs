//! How long a flood of new keys from one IPv6 /48 at 1,000 requests a second
//! takes to fill the memory store's default bound (100,000), and what the
//! site sees then: each scenario drives `Limits` on a `MemoryStore` with
//! every preset, on a manual clock (one request a millisecond) and tokio's
//! paused clock in step with it, so the store's own sweeper runs as it would,
//! and 3 minutes of flood take seconds. BENCHMARKS.md holds what it printed.
//!
//! `cargo run --release --example flood`

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::ManualClock;
use limit_store::error::Unavailable;
use limit_store::{Decision, LimitStore, Limits, MemoryStore};

const T0: i64 = 1_700_000_000_000;
/// Requests a second, one a millisecond.
const RATE: u64 = 1_000;
/// Seconds of flood.
const SECONDS: u64 = 180;

/// One flood: the limit it hits, and the parts of its `i`-th request.
struct Scenario {
    name: &'static str,
    limit: &'static str,
    parts: fn(u64) -> Vec<(&'static str, String)>,
}

/// The `i`-th /64 of the /48 2001:db8:1::/48 (an address in it: the `ip`
/// rule counts it as its /64; `api` counts what it is given, here the /64).
fn slash64(i: u64) -> String {
    format!("2001:db8:1:{:x}::1", i % 65_536)
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario { name: "api, a /64 per request", limit: "api", parts: |i| vec![("client", slash64(i))] },
        Scenario {
            name: "sign-in, a new account and a /64 per request",
            limit: "sign-in",
            parts: |i| vec![("account", format!("user{i}@example.com")), ("ip", slash64(i))],
        },
        Scenario {
            name: "sign-in, one account, a /64 per request",
            limit: "sign-in",
            parts: |i| vec![("account", "ada@example.com".to_owned()), ("ip", slash64(i))],
        },
    ]
}

/// What a new key of each preset gets once the flood has run: by a client,
/// an account and an IP the flood never used.
const PROBES: [(&str, &[(&str, &str)]); 5] = [
    ("api", &[("client", "probe-client")]),
    ("sign-in", &[("account", "probe@example.com"), ("ip", "198.51.100.7")]),
    ("password-reset", &[("account", "probe@example.com"), ("ip", "198.51.100.7")]),
    ("code-sent", &[("destination", "+15550100")]),
    ("code-verify", &[("code", "probe-code")]),
];

fn answer(d: &Decision) -> String {
    match (d.allowed, d.degraded) {
        (_, Some(reason)) => {
            format!("unavailable ({reason}): {} by policy", if d.allowed { "allowed" } else { "denied" })
        }
        (true, None) => "counted, allowed".into(),
        (false, None) => format!("counted, limited by {}", d.limited_by.unwrap_or("?")),
    }
}

async fn run(scenario: &Scenario) {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(100_000, Arc::new(clock.clone())));
    let limits = Limits::builder().store(store.clone()).single_instance(true).build().expect("limits");
    let (mut first_refusal, mut peak, mut refused, mut at_80) = (None, 0, 0u64, None);
    for i in 0..RATE * SECONDS {
        clock.advance(Duration::from_millis(1));
        tokio::time::advance(Duration::from_millis(1)).await;
        let parts = (scenario.parts)(i);
        let parts: Vec<(&str, &str)> = parts.iter().map(|(p, v)| (*p, v.as_str())).collect();
        let d = limits.attempt(scenario.limit, &parts).await.expect("attempt");
        let held = store.stats().unwrap().held;
        peak = peak.max(held);
        if at_80.is_none() && held * 5 >= store.stats().unwrap().max_entries * 4 {
            at_80 = Some(i);
        }
        if d.degraded == Some(Unavailable::Full) {
            refused += 1;
            first_refusal.get_or_insert((i, held, answer(&d)));
        }
    }
    let seconds = |i: u64| format!("{:.1} s", (i + 1) as f64 / RATE as f64);
    println!("\n## {}", scenario.name);
    println!(
        "- requests: {} over {SECONDS} s; held at the end: {}; most held: {peak}",
        RATE * SECONDS,
        store.stats().unwrap().held
    );
    println!("- 80% of the bound held (entries, live or not yet swept): {}", at_80.map_or("never".into(), seconds));
    match first_refusal {
        Some((i, held, what)) => {
            println!(
                "- share full (first new key refused): {} with {held} held; {refused} refused; the flood gets: {what}",
                seconds(i)
            )
        }
        None => println!("- share full: never"),
    }
    for (limit, parts) in PROBES {
        let d = limits.attempt(limit, parts).await.expect("probe");
        println!("  - a new key of `{limit}`: {}", answer(&d));
    }
    let swept = store.sweep().await.expect("sweep");
    println!("- a sweep at the end removes {swept} expired entries, leaving {}", store.stats().unwrap().held);
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    tracing_subscriber::fmt().with_env_filter("warn").with_target(false).without_time().init();
    println!("One /48 at {RATE} requests a second, {SECONDS} s, memory store at its default bound.");
    for scenario in scenarios() {
        run(&scenario).await;
    }
}
