//! Bytes per live entry: the RSS a store grows by for 100,000 keys of 200
//! bytes, each shape in a process of its own (this bench run again with
//! `LIMIT_STORE_BENCH_BYTES=<shape>`), so that no shape's freed memory is
//! counted in another's.
//!
//! Shapes: a bare number, `{"n": n}`, and what the `sign-in` preset writes
//! (50,000 attempts, each on its own account and IP: a lockout count and a
//! sliding window's `[t, 0]`), beside governor's keyed limiter on the same keys.

use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use limit_store::{Entry, LimitStore, Limits, MemoryStore, Millis, Write};

/// Live entries each shape makes.
const ENTRIES: usize = 100_000;
/// Bytes of each key, as the aim asks.
const KEY_BYTES: usize = 200;

const SHAPES: &[(&str, &str)] = &[
    ("number", "`MemoryStore`, a bare number"),
    ("object", "`MemoryStore`, `{\"n\": n}`"),
    ("sign-in", "`MemoryStore`, what `sign-in` writes"),
    ("governor", "governor keyed"),
];

/// The environment variable that makes this process a child measuring one shape.
const CHILD: &str = "LIMIT_STORE_BENCH_BYTES";

fn key(i: usize) -> String {
    format!("{i:0>KEY_BYTES$}")
}

/// Resident bytes of this process (Linux).
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    let mut cx = Context::from_waker(Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("the memory store awaited"),
    }
}

fn put(store: &MemoryStore, key: &str, value: serde_json::Value) {
    let mut apply = |_: &[Option<Entry>], now: Millis| {
        vec![Write::Put(Entry { value: value.clone(), expires_at: now + 3_600_000 })]
    };
    ready(LimitStore::update(store, &[key], &mut apply)).expect("update");
}

/// Fills one shape and answers its bytes per live entry.
fn measure(shape: &str) -> Option<f64> {
    let keys: Vec<String> = (0..ENTRIES).map(key).collect();
    let before = rss()?;
    let (after, entries) = match shape {
        "number" | "object" => {
            let store = MemoryStore::with_max_entries(1_000_000);
            for (i, k) in keys.iter().enumerate() {
                let n = i as u64 % 1000;
                let value = if shape == "number" { serde_json::json!(n) } else { serde_json::json!({ "n": n }) };
                put(&store, k, value);
            }
            (rss()?, store.stats().unwrap().held)
        }
        "sign-in" => {
            let store = Arc::new(MemoryStore::with_max_entries(1_000_000));
            let limits = Limits::builder().store(store.clone()).single_instance(true).build().ok()?;
            for (i, account) in keys.iter().take(ENTRIES / 2).enumerate() {
                let ip = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
                let d = ready(limits.attempt("sign-in", &[("account", account), ("ip", &ip)])).ok()?;
                assert!(d.allowed);
            }
            (rss()?, store.stats().unwrap().held)
        }
        "governor" => {
            let quota = governor::Quota::per_second(std::num::NonZeroU32::new(1_000_000).unwrap());
            let limiter = governor::RateLimiter::keyed(quota);
            for k in &keys {
                assert!(limiter.check_key(k).is_ok());
            }
            (rss()?, limiter.len() as u64)
        }
        _ => return None,
    };
    Some(after.saturating_sub(before) as f64 / entries.max(1) as f64)
}

/// In a child: measures its shape, prints the figure and exits. Else nothing.
pub fn child() {
    if let Some(shape) = std::env::var_os(CHILD) {
        let figure = measure(&shape.to_string_lossy()).map_or("-".into(), |b| format!("{b:.0}"));
        println!("{figure}");
        std::process::exit(0);
    }
}

/// Runs each shape in a child process and prints the table.
pub fn print_table() {
    let Ok(exe) = std::env::current_exe() else { return };
    let mut figures = Vec::new();
    for (shape, label) in SHAPES {
        let out = std::process::Command::new(&exe).env(CHILD, shape).output();
        let bytes: Option<f64> = out.ok().and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
        figures.push((*shape, *label, bytes));
    }
    let governor = figures.iter().find(|f| f.0 == "governor").and_then(|f| f.2);
    println!();
    println!("Bytes per live entry: RSS growth over {ENTRIES} keys of {KEY_BYTES} bytes, a process per shape.");
    println!();
    println!("| shape | bytes per entry | ÷ governor (aim ≤ 1.5) |");
    println!("|---|---:|---:|");
    for (_, label, bytes) in figures {
        let ratio = match (bytes, governor) {
            (Some(b), Some(g)) if g > 0.0 => format!("{:.2}", b / g),
            _ => "-".into(),
        };
        println!("| {label} | {} | {ratio} |", bytes.map_or("-".into(), |b| format!("{b:.0}")));
    }
}
