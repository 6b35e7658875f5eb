//! `RedisStore` counting requests, side by side in one run with the peers a
//! site would pick instead and with Redis's own ceiling. See BENCHMARKS.md,
//! "Redis store", and issue 13's aim: at least 1.0× rate-limiter-flexible and
//! limitador at 8 and 32 callers, at least 0.4× `redis-benchmark` INCR at 32.
//!
//! Every contender counts one request per op against a key drawn uniformly
//! from the same 100,000 keys (`user:` + 16 hex digits of SHA-256 of the
//! index), with C concurrent callers (tokio tasks; promises for the Node peer)
//! for C in 1, 8 and 32, each point a fixed time after a warm-up. Before its
//! points, every contender counts each key once (untimed), so every measured
//! count updates a live entry.
//!
//! - limit-store `RedisStore`: `update` with an `apply` that reads `n` (a bare
//!   JSON number) and writes `n + 1` with the entry's expiry, or 1 with an
//!   hour to live (as benches/database counts); bare (`update_with`), and
//!   through `Guarded` with an owned `apply` (`update_owned`, as `Limits` calls it).
//!   With `--fresh`, also on brand-new keys (unique to the run, a minute to
//!   live), with a store of its own so that they do not crowd the live keys
//!   out of the other store's memory of the entries it last wrote.
//! - rate-limiter-flexible's `RateLimiterRedis` on ioredis (`node
//!   bench/node/rlf.js --db redis`).
//! - limitador's `AsyncRedisStorage` (`bench/limitador`, its own cargo
//!   project; `bash bench/redis.sh` builds it).
//! - `redis-benchmark -P 1 -c C -r 100000 INCR lsbench:incr:__rand_int__`:
//!   one plain command per round trip, the ceiling for anything that counts
//!   with one round trip per count.
//!
//! Run everything with `bash bench/redis.sh`, or `cargo bench --bench redis
//! --features redis -- [--secs 4] [--warmup 1] [--rounds 2] [--callers 1,8,32]
//! [--fresh] [--remember N] [--no-node] [--no-limitador] [--no-incr]`. Server:
//! `LIMIT_STORE_BENCH_REDIS` (default redis://127.0.0.1:6379). Every key the
//! bench writes has an expiry; only `redis-benchmark`'s `lsbench:incr:*` keys
//! have none, and bench/redis.sh removes them after the run.

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use limit_store::{update_with, Entry, Guarded, LimitStore, Millis, RedisStore, Write};
use sha2::{Digest, Sha256};

const KEY_COUNT: usize = 100_000;
const HOUR_MS: Millis = 3_600_000;
const MINUTE_MS: Millis = 60_000;
const STORE: &str = "limit-store `RedisStore`";
const GUARDED: &str = "limit-store `Guarded<RedisStore>`";
const FRESH: &str = "limit-store `RedisStore`, new keys";
const RLF: &str = "rate-limiter-flexible `RateLimiterRedis`";
const LIMITADOR: &str = "limitador `AsyncRedisStorage`";
const INCR: &str = "`redis-benchmark` INCR (ceiling)";

struct Opts {
    secs: f64,
    warmup: f64,
    rounds: usize,
    callers: Vec<usize>,
    fresh: bool,
    node: bool,
    limitador: bool,
    incr: bool,
    /// The store's `remember` (keys whose last entry it keeps, to count them
    /// in one round trip); `None`: the store's default.
    remember: Option<usize>,
    url: String,
}

impl Opts {
    fn parse() -> Result<Opts> {
        let mut o = Opts {
            secs: 4.0,
            warmup: 1.0,
            rounds: 2,
            callers: vec![1, 8, 32],
            fresh: false,
            node: true,
            limitador: true,
            incr: true,
            remember: None,
            url: std::env::var("LIMIT_STORE_BENCH_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().context(format!("{a} needs a value"));
            match a.as_str() {
                "--secs" => o.secs = value()?.parse()?,
                "--warmup" => o.warmup = value()?.parse()?,
                "--rounds" => o.rounds = value()?.parse()?,
                "--callers" => o.callers = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
                "--fresh" => o.fresh = true,
                "--no-node" => o.node = false,
                "--no-limitador" => o.limitador = false,
                "--no-incr" => o.incr = false,
                "--remember" => o.remember = Some(value()?.parse()?),
                "--bench" => {} // cargo bench passes it
                other => bail!("unknown argument {other:?}"),
            }
        }
        Ok(o)
    }
}

/// `user:` + 16 hex digits of SHA-256 of the index; rlf.js and bench/limitador build the same list.
fn keys() -> Vec<String> {
    (0..KEY_COUNT)
        .map(|i| {
            let d = Sha256::digest(i.to_string().as_bytes());
            let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("user:{hex}")
        })
        .collect()
}

/// The fixed-window count: `n + 1` with the entry's expiry, or 1 with `window` to live.
fn count(current: &[Option<Entry>], now: Millis, window: Millis) -> (Vec<Write>, u64) {
    let (n, expires_at) = match &current[0] {
        Some(e) => (e.value.as_u64().unwrap_or(0), e.expires_at),
        None => (0, now + window),
    };
    (vec![Write::Put(Entry { value: (n + 1).into(), expires_at })], n + 1)
}

/// A small xorshift per caller: uniform key indexes without a shared RNG.
struct Rng(u64);
impl Rng {
    fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap()
    }
}

/// Which keys a store contender counts on.
#[derive(Clone, Copy)]
enum Keys {
    /// The 100,000 pre-filled keys, uniformly.
    Live,
    /// A key no one counted before: the run's tag and a sequence number.
    Fresh,
}

/// Runs `callers` tasks, each counting one at a time, for `warmup` then
/// `secs`; answers counts per second over the measured part and its errors.
/// With `owned`, each count goes through `update_owned` with a boxed
/// `apply`, as `Limits` calls a store; else through `update_with`.
async fn drive(
    store: Arc<dyn LimitStore>,
    keys: Arc<Vec<String>>,
    which: Keys,
    owned: bool,
    callers: usize,
    o: &Opts,
) -> (f64, u64) {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tag = format!("{:x}", std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (store, keys, tag) = (store.clone(), keys.clone(), tag.clone());
            let (done, errors, stop) = (done.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x2545_F491_4F6C_DD1D));
                while !stop.load(Ordering::Relaxed) {
                    let fresh;
                    let key = match which {
                        Keys::Live => keys[rng.next(keys.len())].as_str(),
                        Keys::Fresh => {
                            fresh = format!("new:{tag}:{}", SEQ.fetch_add(1, Ordering::Relaxed));
                            fresh.as_str()
                        }
                    };
                    let window = if matches!(which, Keys::Fresh) { MINUTE_MS } else { HOUR_MS };
                    let counted = if owned {
                        store.update_owned(&[key], Box::new(move |cur, now| count(cur, now, window).0)).await
                    } else {
                        update_with(&*store, &[key], |cur, now| count(cur, now, window)).await.map(drop)
                    };
                    match counted {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("  error: {e}");
                            }
                            0
                        }
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(o.warmup)).await;
    let (n0, e0, t0) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(o.secs)).await;
    let (n1, e1, t1) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    ((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), e1 - e0)
}

/// Counts every key once, 32 in flight, untimed.
async fn prefill(store: Arc<dyn LimitStore>, keys: Arc<Vec<String>>) -> Result<()> {
    let next = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..32)
        .map(|_| {
            let (store, keys, next) = (store.clone(), keys.clone(), next.clone());
            tokio::spawn(async move {
                while let Some(key) = keys.get(next.fetch_add(1, Ordering::Relaxed)) {
                    update_with(&*store, &[key.as_str()], |cur, now| count(cur, now, HOUR_MS)).await?;
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

/// How a contender runs one point.
enum Runner {
    /// In this process.
    /// `redis` is the store under `store`, which says how many round trips its updates took.
    Store { store: Arc<dyn LimitStore>, redis: Arc<RedisStore>, keys: Keys, owned: bool },
    /// A child speaking rlf.js's `--serve 1` protocol: one stdin line "C WARMUP SECS", one JSON line back.
    Child { child: Child, out: BufReader<ChildStdout> },
    /// One `redis-benchmark` run per point.
    Incr,
}

struct Contender {
    name: &'static str,
    runner: Runner,
}

impl Contender {
    /// Starts `program args… --serve 1`, which fills its keys and says "ready".
    fn child(name: &'static str, dir: &Path, program: &str, args: &[&str]) -> Result<Contender> {
        let mut child = Command::new(program)
            .current_dir(dir)
            .args(args)
            .args(["--serve", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {program}"))?;
        let mut out = BufReader::new(child.stdout.take().context("child stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("{name} did not start: {line:?}");
        }
        Ok(Contender { name, runner: Runner::Child { child, out } })
    }

    async fn point(&mut self, keys: &Arc<Vec<String>>, c: usize, o: &Opts, last: Option<f64>) -> Result<(f64, u64)> {
        let name = self.name;
        match &mut self.runner {
            Runner::Store { store, redis, keys: which, owned } => {
                let before = redis.round_trips();
                let r = drive(store.clone(), keys.clone(), *which, *owned, c, o).await;
                let after = redis.round_trips();
                let (one, two, more) = (after.one - before.one, after.two - before.two, after.more - before.more);
                let all = (one + two + more).max(1) as f64;
                eprintln!(
                    "  {name} C={c}: round trips per update: one {:.0}%, two {:.0}%, more {:.0}%",
                    100.0 * one as f64 / all,
                    100.0 * two as f64 / all,
                    100.0 * more as f64 / all
                );
                Ok(r)
            }
            Runner::Child { child, out } => {
                let stdin = child.stdin.as_mut().context("child stdin")?;
                writeln!(stdin, "{c} {} {}", o.warmup, o.secs)?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                let v: serde_json::Value =
                    serde_json::from_str(&line).context(format!("{} said {line:?}", self.name))?;
                let per_sec = v["counts"].as_f64().context("counts")? / v["secs"].as_f64().context("secs")?;
                Ok((per_sec, v["errors"].as_u64().unwrap_or(0)))
            }
            Runner::Incr => incr(&o.url, c, o.secs, last),
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if let Runner::Child { child, .. } = &mut self.runner {
            drop(child.stdin.take()); // end of input: the child closes its connection and exits
            let _ = child.wait();
        }
    }
}

/// `redis-benchmark` INCR over 100,000 keys of the bench's own prefix, C
/// clients, no pipelining, sized from the last figure to last about `secs`.
fn incr(url: &str, c: usize, secs: f64, last: Option<f64>) -> Result<(f64, u64)> {
    let rest = url.strip_prefix("redis://").context("redis-benchmark needs a redis:// URL")?;
    let hostport = rest.rsplit('@').next().unwrap_or(rest).split('/').next().unwrap_or(rest);
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "6379"));
    let n = format!("{:.0}", (last.unwrap_or(20_000.0 * c.min(4) as f64) * secs).clamp(2_000.0, 1e9));
    let out = Command::new("redis-benchmark")
        .args(["-h", host, "-p", port, "-c", &c.to_string(), "-n", &n, "-P", "1"])
        .args(["-r", &KEY_COUNT.to_string(), "--csv", "INCR", "lsbench:incr:__rand_int__"])
        .output()
        .context("run redis-benchmark")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("redis-benchmark failed: {}{text}", String::from_utf8_lossy(&out.stderr));
    }
    // `"test","rps",…` then `"INCR lsbench:incr:__rand_int__","52631.58",…`
    let rps = text
        .lines()
        .find(|l| l.starts_with("\"INCR"))
        .and_then(|l| l.split(',').nth(1))
        .map(|f| f.trim_matches('"').parse::<f64>())
        .context(format!("no rps in redis-benchmark output: {text}"))??;
    Ok((rps, 0))
}

/// One figure of the table: counts/s of every round.
struct Point {
    name: &'static str,
    callers: usize,
    rounds: Vec<f64>,
    errors: u64,
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r.max(0.0));
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn print_table(o: &Opts, res: &[Point], names: &[&'static str]) {
    let find = |name: &str, c: usize| res.iter().find(|p| p.name == name && p.callers == c);
    println!();
    println!(
        "Counts per second: median of {} rounds (lowest-highest), {} s per point after {} s of warm-up, keys uniform over 100,000.",
        o.rounds, o.secs, o.warmup
    );
    println!();
    let head: Vec<String> = o.callers.iter().map(|c| format!("{c} caller{}", if *c == 1 { "" } else { "s" })).collect();
    println!("| contender | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(head.len()));
    for name in names {
        let cells: Vec<String> = o
            .callers
            .iter()
            .map(|&c| {
                find(name, c).map_or("-".into(), |p| {
                    let lo = p.rounds.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = p.rounds.iter().copied().fold(0.0, f64::max);
                    let errs = if p.errors > 0 { format!(", {} errors", p.errors) } else { String::new() };
                    format!("{} ({}-{}){errs}", fmt_rate(median(&p.rounds)), fmt_rate(lo), fmt_rate(hi))
                })
            })
            .collect();
        println!("| {name} | {} |", cells.join(" | "));
    }
    // Per round, ours over theirs; the median and range of those.
    let ratio = |ours: &str, theirs: &str, c: usize| -> String {
        let (Some(a), Some(b)) = (find(ours, c), find(theirs, c)) else { return "-".into() };
        let r: Vec<f64> = a.rounds.iter().zip(&b.rounds).map(|(a, b)| a / b).collect();
        if r.is_empty() {
            return "-".into();
        }
        let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.iter().copied().fold(0.0, f64::max);
        format!("**{:.2}** ({lo:.2}-{hi:.2})", median(&r))
    };
    let cols: Vec<(&str, usize, f64)> =
        [(RLF, 8, 1.0), (RLF, 32, 1.0), (LIMITADOR, 8, 1.0), (LIMITADOR, 32, 1.0), (INCR, 32, 0.4)]
            .into_iter()
            .filter(|(n, c, _)| names.contains(n) && o.callers.contains(c))
            .collect();
    if cols.is_empty() {
        return;
    }
    println!();
    println!(
        "limit-store's counts/s over the peer's, per round: median (lowest-highest). Issue 13's aim in the header."
    );
    println!();
    let head: Vec<String> = cols
        .iter()
        .map(|(n, c, aim)| {
            let short = n.split_whitespace().next().unwrap_or(n).trim_matches('`');
            format!("÷ {short} at {c} (aim ≥ {aim:.1})")
        })
        .collect();
    println!("| limit-store | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(cols.len()));
    for ours in [STORE, GUARDED].into_iter().filter(|n| names.contains(n)) {
        let cells: Vec<String> = cols.iter().map(|(n, c, _)| ratio(ours, n, *c)).collect();
        println!("| {ours} | {} |", cells.join(" | "));
    }
}

fn main() -> Result<()> {
    let o = Opts::parse()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let began = Instant::now();
        let keys = Arc::new(keys());
        let mut contenders = Vec::new();

        eprintln!("limit-store: connecting, counting every key once");
        // Keys under a prefix of the bench's own; a bound no run reaches (the
        // new-key contender adds an entry per count).
        let mut builder =
            RedisStore::builder(&o.url).secret(&"x".repeat(40)).prefix("lsbench").max_entries(100_000_000);
        if let Some(n) = o.remember {
            builder = builder.remember(n);
        }
        let store = Arc::new(builder.clone().connect().await?);
        let bare: Arc<dyn LimitStore> = store.clone();
        prefill(bare.clone(), keys.clone()).await.context("limit-store's fill")?;
        contenders.push(Contender {
            name: STORE,
            runner: Runner::Store { store: bare.clone(), redis: store.clone(), keys: Keys::Live, owned: false },
        });
        let guarded: Arc<dyn LimitStore> = Arc::new(Guarded::new(store.clone()));
        contenders.push(Contender {
            name: GUARDED,
            runner: Runner::Store { store: guarded, redis: store.clone(), keys: Keys::Live, owned: true },
        });
        if o.fresh {
            // A store of its own: the new keys it remembers would otherwise
            // push the live keys out of the other rows' store's memory, and
            // their counts would take two round trips.
            let fresh = Arc::new(builder.connect().await?);
            contenders.push(Contender {
                name: FRESH,
                runner: Runner::Store { store: fresh.clone(), redis: fresh, keys: Keys::Fresh, owned: false },
            });
        }
        if o.node {
            eprintln!("rate-limiter-flexible: starting, consuming every key once");
            let dir = root.join("bench").join("node");
            if !dir.join("node_modules").exists() {
                bail!("run `npm ci` in {} first (bash bench/redis.sh does)", dir.display());
            }
            let n = KEY_COUNT.to_string();
            contenders.push(Contender::child(
                RLF,
                &dir,
                "node",
                &["rlf.js", "--db", "redis", "--url", &o.url, "--keys", &n],
            )?);
        }
        if o.limitador {
            eprintln!("limitador: starting, counting every key once");
            let dir = root.join("bench").join("limitador");
            let bin = dir.join("target").join("release").join("limit-store-bench-limitador");
            if !bin.exists() {
                bail!("build {} first (bash bench/redis.sh does), or pass --no-limitador", bin.display());
            }
            contenders.push(Contender::child(LIMITADOR, &dir, bin.to_str().context("path")?, &["--url", &o.url])?);
        }
        if o.incr {
            contenders.push(Contender { name: INCR, runner: Runner::Incr });
        }

        // Rounds: for each caller count, every contender in turn, so a slow
        // spell of the shared machine hits all of them.
        let mut res: Vec<Point> = Vec::new();
        for round in 1..=o.rounds {
            eprintln!(" round {round}/{}", o.rounds);
            for &c in &o.callers {
                for k in contenders.iter_mut() {
                    let last = res.iter().find(|p| p.name == k.name && p.callers == c).map(|p| median(&p.rounds));
                    match k.point(&keys, c, &o, last).await {
                        Ok((r, e)) => {
                            eprintln!(
                                "  {:<44} C={c:<3} {r:>9.0}/s{}",
                                k.name,
                                if e > 0 { format!("  ({e} errors)") } else { String::new() }
                            );
                            match res.iter_mut().find(|p| p.name == k.name && p.callers == c) {
                                Some(p) => {
                                    p.rounds.push(r);
                                    p.errors += e;
                                }
                                None => res.push(Point { name: k.name, callers: c, rounds: vec![r], errors: e }),
                            }
                        }
                        Err(e) => eprintln!("  {} C={c}: {e:#}", k.name),
                    }
                }
            }
        }
        let names: Vec<&'static str> = contenders.iter().map(|k| k.name).collect();
        drop(contenders);
        print_table(&o, &res, &names);
        eprintln!("took {:.0} s", began.elapsed().as_secs_f64());
        Ok(())
    })
}
