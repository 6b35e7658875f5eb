//! limitador's `AsyncRedisStorage`, counted the way benches/redis.rs counts
//! limit-store: keys drawn uniformly from the same 100,000 strings, C callers
//! (tokio tasks) in flight, a fixed time per point.
//!
//!   limit-store-bench-limitador --url redis://127.0.0.1:6379 --callers 1,8,32 --secs 5 --warmup 2
//!   limit-store-bench-limitador --url URL --serve 1
//!     (as benches/redis.rs runs it: one point per stdin line "C WARMUP SECS")
//!
//! Prints one JSON line per caller count, as bench/node/rlf.js does:
//! {"callers":C,"counts":N,"secs":S,"errors":E}. One limit (namespace
//! `lsbench_limitador`, a max no count reaches, a 1-hour window) with the
//! variable `user`; every count is one `check_rate_limited_and_update` with
//! delta 1. Before the points it counts every key once (untimed), so every
//! measured count updates an existing counter, as in the other contenders.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use limitador::limit::{Context, Expression, Limit, Namespace};
use limitador::storage::redis::AsyncRedisStorage;
use limitador::AsyncRateLimiter;
use tokio::io::{AsyncBufReadExt, BufReader};

// The same keys as benches/redis and rlf.js, and the same draw of them.
#[path = "../../../benches/common/keys.rs"]
mod keys;
use keys::{keys, Rng};

const NAMESPACE: &str = "lsbench_limitador";
const MAX: u64 = 1_000_000_000_000;
const WINDOW_SECS: u64 = 3600;

struct Opts {
    url: String,
    callers: Vec<usize>,
    secs: f64,
    warmup: f64,
    keys: usize,
    serve: bool,
}

fn opts() -> Result<Opts> {
    let mut o = Opts {
        url: "redis://127.0.0.1:6379".into(),
        callers: vec![1, 8, 32],
        secs: 5.0,
        warmup: 2.0,
        keys: 100_000,
        serve: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().with_context(|| format!("{a} needs a value"))?;
        match a.as_str() {
            "--url" => o.url = v,
            "--callers" => o.callers = v.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--secs" => o.secs = v.parse()?,
            "--warmup" => o.warmup = v.parse()?,
            "--keys" => o.keys = v.parse()?,
            "--serve" => o.serve = v != "0",
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(o)
}

/// One count: limitador's context is built per request, as a proxy does.
async fn count(limiter: &AsyncRateLimiter, ns: &Namespace, key: &str) -> Result<()> {
    let ctx: Context = HashMap::from([("user".to_owned(), key.to_owned())]).into();
    let r = limiter.check_rate_limited_and_update(ns, &ctx, 1).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    if r.limited {
        bail!("limitador limited a count");
    }
    Ok(())
}

/// `callers` tasks counting on random keys, one count at a time each, for
/// `warmup` then `secs`: counts and errors over the measured part.
async fn run(
    limiter: Arc<AsyncRateLimiter>,
    keys: Arc<Vec<String>>,
    callers: usize,
    warmup: f64,
    secs: f64,
) -> (u64, u64, f64) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (limiter, keys, done, errors, stop) =
                (limiter.clone(), keys.clone(), done.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                let ns = Namespace::from(NAMESPACE);
                let mut rng = Rng::for_caller(c);
                while !stop.load(Ordering::Relaxed) {
                    match count(&limiter, &ns, &keys[rng.next(keys.len())]).await {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("limitador count failed: {e:#}");
                            }
                            0
                        }
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(warmup)).await;
    let (n0, e0, t0) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (n1, e1, t1) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    (n1 - n0, e1 - e0, (t1 - t0).as_secs_f64())
}

async fn point(limiter: &Arc<AsyncRateLimiter>, keys: &Arc<Vec<String>>, c: usize, warmup: f64, secs: f64) {
    let (counts, errors, secs) = run(limiter.clone(), keys.clone(), c, warmup, secs).await;
    println!("{{\"callers\":{c},\"counts\":{counts},\"secs\":{secs},\"errors\":{errors}}}");
}

fn main() -> Result<()> {
    let o = opts()?;
    // Two workers, as benches/redis.rs runs limit-store.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let keys = Arc::new(keys(o.keys));
        let storage = AsyncRedisStorage::new(&o.url).await.context("limitador: connect to Redis")?;
        let limiter = Arc::new(AsyncRateLimiter::new_with_storage(Box::new(storage)));
        let user: Expression = "user".try_into().map_err(|e| anyhow::anyhow!("{e:?}"))?;
        limiter.add_limit(Limit::new(NAMESPACE, MAX, WINDOW_SECS, vec![], vec![user]));

        // Pre-fill: count every key once, 32 in flight, untimed.
        let next = Arc::new(AtomicUsize::new(0));
        let fillers: Vec<_> = (0..32)
            .map(|_| {
                let (limiter, keys, next) = (limiter.clone(), keys.clone(), next.clone());
                tokio::spawn(async move {
                    let ns = Namespace::from(NAMESPACE);
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(k) = keys.get(i) else { return Ok::<_, anyhow::Error>(()) };
                        count(&limiter, &ns, k).await?;
                    }
                })
            })
            .collect();
        for f in fillers {
            f.await??;
        }

        if !o.serve {
            for &c in &o.callers {
                point(&limiter, &keys, c, o.warmup, o.secs).await;
            }
            return Ok(());
        }
        // --serve 1: prints "ready", then one point per stdin line "C WARMUP SECS".
        println!("ready");
        let mut lines = BufReader::new(tokio::io::stdin()).lines();
        while let Some(line) = lines.next_line().await? {
            let f: Vec<f64> = line.split_whitespace().filter_map(|s| s.parse().ok()).collect();
            let [c, warmup, secs] = f[..] else { break };
            if c < 1.0 {
                break;
            }
            point(&limiter, &keys, c as usize, warmup, secs).await;
        }
        Ok(())
    })
}
