//! Counting with limit-store's store in this process: C callers for a fixed
//! time, and the untimed fill before the points.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use limit_store::{update_with, LimitStore, Limits};

use super::stats::{per_count, Probe};
use super::{count, count_all, Opts, Rng, HOUR_MS, MINUTE_MS};

/// Which keys a store contender counts on.
#[derive(Clone)]
pub(crate) enum Keys {
    /// The 100,000 pre-filled keys, uniformly.
    Live,
    /// A key no one counted before: the run's tag and a sequence number.
    Fresh,
    /// Two keys at once: one of the list's and the same index of these.
    Pair(Arc<Vec<String>>),
}

/// How a store contender counts one key.
#[derive(Clone)]
pub(crate) enum How {
    /// `update_with`, the fixed window's `apply` borrowed.
    Update,
    /// `update_owned` with a boxed `apply`, as `Limits` calls a store for
    /// any limit but a one-part GCRA.
    Owned,
    /// `Limits::attempt` on [`LIMIT`]'s one part: a GCRA, whose count
    /// goes through the store's integer counts.
    Attempt(Limits),
}

/// The limit the `Limits` rows count on, with a budget no run reaches.
pub(crate) const LIMIT: &str = "bench";

/// `Limits` of one limit, [`LIMIT`]: a GCRA of 3,600,000 attempts an hour (one a ms), on `store`.
pub(crate) fn limits(store: Arc<dyn LimitStore>) -> Result<Limits> {
    use limit_store::limits::{Algorithm, Limit, Part};
    let part = Part::new("client", Algorithm::gcra(3_600_000, Duration::from_secs(3600)));
    Ok(Limits::builder().store(store).without_presets().limit(Limit::new(LIMIT).part(part)).build()?)
}

/// One count of `key` as `how` says.
async fn count_one(store: &dyn LimitStore, how: &How, key: &str, window: i64) -> Result<(), String> {
    match how {
        How::Update => update_with(store, &[key], |cur, now| count(cur, now, window)).await.map(drop),
        How::Owned => store.update_owned(&[key], Box::new(move |cur, now| count(cur, now, window).0)).await,
        How::Attempt(limits) => {
            return match limits.attempt(LIMIT, &[("client", key)]).await {
                Ok(decided) if decided.allowed && decided.degraded.is_none() => Ok(()),
                Ok(decided) => Err(format!("{decided:?}")),
                Err(e) => Err(e.to_string()),
            };
        }
    }
    .map_err(|e| e.to_string())
}

/// Runs `callers` tasks, each counting one at a time (as `how` says), for
/// `warmup` then `secs`; answers counts per second over the measured part
/// and its errors, and with a `probe` (`--stats`) its figures per count there.
pub(crate) async fn drive(
    store: Arc<dyn LimitStore>,
    keys: Arc<Vec<String>>,
    which: Keys,
    how: How,
    callers: usize,
    o: &Opts,
    mut probe: Option<&mut Probe>,
) -> (f64, u64, Option<String>) {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tag = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (store, keys, tag, which, how) = (store.clone(), keys.clone(), tag.clone(), which.clone(), how.clone());
            let (done, errors, stop) = (done.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng::for_caller(c);
                while !stop.load(Ordering::Relaxed) {
                    let fresh;
                    let key = match &which {
                        Keys::Live => keys[rng.next(keys.len())].as_str(),
                        Keys::Fresh => {
                            fresh = format!("new:{tag}:{}", SEQ.fetch_add(1, Ordering::Relaxed));
                            fresh.as_str()
                        }
                        Keys::Pair(seconds) => {
                            let i = rng.next(keys.len());
                            let pair = [keys[i].as_str(), seconds[i].as_str()];
                            let counted =
                                update_with(&*store, &pair, |cur, now| (count_all(cur, now, HOUR_MS), ())).await;
                            tally(counted.map_err(|e| e.to_string()), &done, &errors);
                            continue;
                        }
                    };
                    let window = if matches!(which, Keys::Fresh) { MINUTE_MS } else { HOUR_MS };
                    tally(count_one(&*store, &how, key, window).await, &done, &errors);
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(o.timing.warmup)).await;
    let s0 = match probe.as_deref_mut() {
        Some(p) => Some(p.snap().await),
        None => None,
    };
    let (n0, e0, t0) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(o.timing.secs)).await;
    let (n1, e1, t1) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    let stats = match (probe, s0) {
        (Some(p), Some(s0)) => Some(match (s0, p.snap().await) {
            (Ok(a), Ok(b)) => per_count(&a, &b, n1 - n0),
            (Err(e), _) | (_, Err(e)) => format!("no figures: {e:#}"),
        }),
        _ => None,
    };
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    ((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), e1 - e0, stats)
}

/// A count done, or an error (the first one printed).
fn tally(counted: Result<(), String>, done: &AtomicU64, errors: &AtomicU64) {
    match counted {
        Ok(()) => {
            done.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!("  error: {e}");
            }
        }
    }
}

/// Counts every key (or pair, with [`Keys::Pair`]) once, as `how` says (a
/// pair by `update_with`), 32 in flight, untimed.
pub(crate) async fn prefill(store: Arc<dyn LimitStore>, keys: Arc<Vec<String>>, which: Keys, how: How) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, keys, next, which, how) =
                (store.clone(), keys.clone(), next.clone(), which.clone(), how.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(key) = keys.get(i) else { break };
                    match &which {
                        Keys::Pair(seconds) => {
                            let pair = [key.as_str(), seconds[i].as_str()];
                            update_with(&*store, &pair, |cur, now| (count_all(cur, now, HOUR_MS), ())).await?;
                        }
                        _ => count_one(&*store, &how, key, HOUR_MS).await.map_err(anyhow::Error::msg)?,
                    }
                }
                Ok::<_, anyhow::Error>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    Ok(())
}
