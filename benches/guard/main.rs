//! What `Guarded` adds to a call of a store that answers through a future,
//! side by side with the same store bare, in one run.
//!
//! The store (`Relay`) counts in a `MemoryStore` here and now, then waits for
//! a server task to answer it by message (`oneshot`), as `RedisStore` hands
//! its compare-and-set to a batch task and waits for Redis: every call is
//! pending once and is woken by another task, and the server answers all that
//! wait at once. So the time per call is the caller's own work, the store's
//! (tiny) and the guard's: the difference between the rows is the guard's.
//!
//! - `bare`: `update_with` on the store (a borrowed `apply`), as
//!   benches/redis's bare row;
//! - `bare_owned`: `update_owned` on the store, with a boxed `apply`;
//! - `guarded_owned`: `update_owned` on `Guarded<Relay>` (2 s, 64 in
//!   flight), as `Limits` calls a store and as benches/redis's guarded row;
//! - `guarded_read`: `read` through the guard, for the other owned path.
//!
//! C callers (tokio tasks on a current-thread runtime, as benches/redis runs)
//! for C in 1, 8 and 32, each counting one key of 1,024 at a time; rounds
//! interleave the rows so a slow spell of the shared host hits all of them.
//! Prints ns per call (median of rounds) and each row over `bare`.
//!
//! Run: `cargo bench --bench guard` (`-- --calls N --rounds N --rows a,b`);
//! under `perf record -g` with `--rows guarded_owned` for where its time goes.
//! With `--features redis` and `-- --redis URL [--callers 1,8,32] [--secs S]
//! [--rounds N]`: the same on a real `RedisStore` instead (`on_redis.rs`).

use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use limit_store::{update_with, Apply, Entry, Guarded, LimitStore, MemoryStore, Millis, StoreError, Write};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

#[path = "../common/figures.rs"]
mod figures;
#[cfg(feature = "redis")]
#[path = "../common/keys.rs"]
mod keys;
#[cfg(feature = "redis")]
mod on_redis;

const KEYS: usize = 1_024;
const ROWS: [&str; 4] = ["bare", "bare_owned", "guarded_owned", "guarded_read"];

/// A store that counts in memory, then waits for a server task's answer.
struct Relay {
    inner: MemoryStore,
    server: mpsc::UnboundedSender<oneshot::Sender<()>>,
}

impl Relay {
    /// A relay whose server task runs on the current runtime.
    fn start() -> Arc<Self> {
        let (server, mut asked) = mpsc::unbounded_channel::<oneshot::Sender<()>>();
        tokio::spawn(async move {
            let mut waiting = Vec::with_capacity(64);
            while asked.recv_many(&mut waiting, 64).await > 0 {
                for answer in waiting.drain(..) {
                    let _ = answer.send(());
                }
            }
        });
        Arc::new(Relay { inner: MemoryStore::new(), server })
    }

    async fn answered(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.server
            .send(tx)
            .map_err(|_| StoreError::unavailable(limit_store::error::Unavailable::StoreFailed, "gone"))?;
        rx.await.map_err(|_| StoreError::unavailable(limit_store::error::Unavailable::StoreFailed, "lost"))
    }
}

#[async_trait::async_trait]
impl LimitStore for Relay {
    fn shared(&self) -> bool {
        true
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        let done = self.inner.update_now(keys, apply).expect("the memory store answers at once");
        self.answered().await?;
        done
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        let entries = self.inner.read(keys).await;
        self.answered().await?;
        entries
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }
}

/// One count: `n + 1` with an hour to live.
fn count(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
    vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 3_600_000 })]
}

/// Runs `calls` calls of `row` from `callers` tasks; answers ns per call.
async fn run(
    row: &'static str,
    relay: &Arc<Relay>,
    guard: &Arc<Guarded<Relay>>,
    keys: &Arc<Vec<String>>,
    callers: usize,
    calls: usize,
) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (relay, guard, keys) = (relay.clone(), guard.clone(), keys.clone());
            tokio::spawn(async move {
                for i in 0..calls / callers {
                    let key = keys[(i * 31 + c * 97) % KEYS].as_str();
                    let done = match row {
                        "bare" => update_with(&*relay, &[key], |cur, now| (count(cur, now), ())).await,
                        "bare_owned" => relay.update_owned(&[key], Box::new(count)).await,
                        "guarded_owned" => guard.update_owned(&[key], Box::new(count)).await,
                        _ => guard.read(&[key]).await.map(drop),
                    };
                    done.expect("the relay answers");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("a caller panicked");
    }
    started.elapsed().as_nanos() as f64 / (calls / callers * callers) as f64
}

fn main() -> Result<()> {
    let (mut calls, mut rounds, mut rows): (usize, usize, Vec<&'static str>) = (200_000, 5, ROWS.to_vec());
    let (mut redis, mut callers, mut secs): (Option<String>, Vec<usize>, f64) = (None, vec![1, 8, 32], 2.0);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().unwrap_or_default().parse()?,
            "--rounds" => rounds = args.next().unwrap_or_default().parse()?,
            "--rows" => {
                let want = args.next().unwrap_or_default();
                rows = ROWS.iter().copied().filter(|r| want.split(',').any(|w| w == *r)).collect();
            }
            "--redis" => redis = args.next(),
            "--callers" => {
                callers = args.next().unwrap_or_default().split(',').map(str::parse).collect::<Result<_, _>>()?
            }
            "--secs" => secs = args.next().unwrap_or_default().parse()?,
            "--bench" => {}
            other => bail!("unknown argument {other:?}"),
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    if let Some(url) = redis {
        #[cfg(feature = "redis")]
        return rt.block_on(on_redis::run(&url, &callers, secs, rounds));
        #[cfg(not(feature = "redis"))]
        bail!("--redis {url} needs --features redis (and {secs} s points)");
    }
    rt.block_on(async {
        let relay = Relay::start();
        let guard = Arc::new(Guarded::new(relay.clone()));
        let keys: Arc<Vec<String>> = Arc::new((0..KEYS).map(|i| format!("user:{i:016x}")).collect());
        let mut ns = vec![vec![Vec::new(); callers.len()]; rows.len()];
        for _ in 0..rounds {
            for (ci, &c) in callers.iter().enumerate() {
                for (ri, &row) in rows.iter().enumerate() {
                    ns[ri][ci].push(run(row, &relay, &guard, &keys, c, calls).await);
                }
            }
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "# {calls} calls per point, {rounds} rounds; load {}",
            load.split(' ').take(3).collect::<Vec<_>>().join(" ")
        );
        let columns: Vec<String> = callers.iter().map(|c| format!("C={c}: ns/call (over bare)")).collect();
        println!("| row | {} |", columns.join(" | "));
        println!("|---|{}", "---|".repeat(callers.len()));
        let medians: Vec<Vec<f64>> = ns.iter().map(|row| row.iter().map(|v| figures::median(v)).collect()).collect();
        let bare = rows.iter().position(|r| *r == "bare");
        for (ri, row) in rows.iter().enumerate() {
            let cells: Vec<String> = (0..callers.len())
                .map(|ci| match bare {
                    Some(b) => format!("{:.0} ({:.2}×)", medians[ri][ci], medians[ri][ci] / medians[b][ci]),
                    None => format!("{:.0}", medians[ri][ci]),
                })
                .collect();
            println!("| `{row}` | {} |", cells.join(" | "));
        }
        Ok(())
    })
}
