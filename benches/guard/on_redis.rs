//! `--redis URL`: the guard on a real `RedisStore`, bare beside guarded, with
//! this process's CPU time per count beside the rate: on a host shared with
//! Redis and other work, the rate moves with the neighbours, the CPU time
//! per count much less, and it is what the guard adds.
//!
//! Both rows count on the same store, one key of 100,000 per count (counted
//! once first, so every count updates a live entry), as benches/redis counts:
//! `bare` through `update_with`, `guarded` through `Guarded::update_owned`
//! with a boxed `apply`, as `Limits` calls it; benches/redis's keys and draw.
//! Rounds interleave the rows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use limit_store::{update_with, Entry, Guarded, LimitStore, Millis, RedisStore, Write};

use super::keys::{keys, Rng};

const KEYS: usize = 100_000;
const HOUR_MS: Millis = 3_600_000;

/// `n + 1` with the entry's expiry, or 1 with an hour to live.
fn count(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let (n, expires_at) = match &current[0] {
        Some(e) => (e.value.as_u64().unwrap_or(0), e.expires_at),
        None => (0, now + HOUR_MS),
    };
    vec![Write::Put(Entry { value: (n + 1).into(), expires_at })]
}

/// This process's CPU time so far (user and system), from /proc/self/stat.
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime
    // are the 12th and 13th of them, in clock ticks (100 a second).
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 = after.split_whitespace().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    Duration::from_millis(ticks * 10)
}

/// `callers` tasks counting for `secs` after `warmup`: counts per second and
/// CPU µs per count over the measured part.
async fn point(
    store: Arc<dyn LimitStore>,
    owned: bool,
    keys: &Arc<Vec<String>>,
    callers: usize,
    secs: f64,
) -> (f64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (store, keys, done, stop) = (store.clone(), keys.clone(), done.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng::for_caller(c);
                while !stop.load(Ordering::Relaxed) {
                    let key = keys[rng.next(keys.len())].as_str();
                    let counted = if owned {
                        store.update_owned(&[key], Box::new(count)).await
                    } else {
                        update_with(&*store, &[key], |cur, now| (count(cur, now), ())).await
                    };
                    counted.expect("Redis counts");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(secs / 4.0)).await;
    let (n0, c0, t0) = (done.load(Ordering::Relaxed), cpu(), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (n1, c1, t1) = (done.load(Ordering::Relaxed), cpu(), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("a caller panicked");
    }
    let n = (n1 - n0) as f64;
    (n / (t1 - t0).as_secs_f64(), (c1 - c0).as_secs_f64() * 1e6 / n)
}

/// Bare and guarded rows on `url`; prints a table of medians.
pub(crate) async fn run(url: &str, callers: &[usize], secs: f64, rounds: usize) -> Result<()> {
    let prefix = format!("lsbench:guard:{}", std::process::id());
    let store = Arc::new(
        RedisStore::builder(url)
            .secret(&"x".repeat(40))
            .prefix(&prefix)
            .max_entries(10_000_000)
            .connect()
            .await
            .with_context(|| format!("connect to {url}"))?,
    );
    let keys = Arc::new(keys(KEYS));
    eprintln!("counting every key once");
    let fill: Vec<_> = (0..32)
        .map(|t| {
            let (store, keys) = (store.clone(), keys.clone());
            tokio::spawn(async move {
                for key in keys.iter().skip(t).step_by(32) {
                    update_with(&*store, &[key.as_str()], |cur, now| (count(cur, now), ())).await.expect("fill");
                }
            })
        })
        .collect();
    for f in fill {
        f.await?;
    }
    let bare: Arc<dyn LimitStore> = store.clone();
    let guarded: Arc<dyn LimitStore> = Arc::new(Guarded::new(store.clone()));
    let rows = [("bare", bare, false), ("guarded", guarded, true)];
    let mut got = vec![vec![(Vec::new(), Vec::new()); callers.len()]; rows.len()];
    for round in 1..=rounds {
        for (ci, &c) in callers.iter().enumerate() {
            for (ri, (name, store, owned)) in rows.iter().enumerate() {
                let (rate, us) = point(store.clone(), *owned, &keys, c, secs).await;
                eprintln!("  round {round} {name:<8} C={c:<3} {rate:>8.0}/s {us:>6.1} µs CPU/count");
                got[ri][ci].0.push(rate);
                got[ri][ci].1.push(us);
            }
        }
    }
    println!(
        "| `RedisStore` | {} |",
        callers.iter().map(|c| format!("C={c}: counts/s, µs CPU/count")).collect::<Vec<_>>().join(" | ")
    );
    println!("|---|{}", "---|".repeat(callers.len()));
    for (ri, (name, ..)) in rows.iter().enumerate() {
        let cells: Vec<String> = got[ri]
            .iter()
            .map(|(rate, us)| format!("{:.0}, {:.1}", super::figures::median(rate), super::figures::median(us)))
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    let over: Vec<String> = (0..callers.len())
        .map(|ci| {
            let r = |ri: usize| super::figures::median(&got[ri][ci].0);
            let u = |ri: usize| super::figures::median(&got[ri][ci].1);
            format!("{:.2}×, {:+.1} µs", r(1) / r(0), u(1) - u(0))
        })
        .collect();
    println!("| guarded over bare | {} |", over.join(" | "));
    // The keys go now: a hundred thousand left to expire would slow every SCAN.
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    let mut cursor = 0u64;
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut con)
            .await?;
        if !found.is_empty() {
            let _: () = redis::cmd("UNLINK").arg(&found).query_async(&mut con).await?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    Ok(())
}
