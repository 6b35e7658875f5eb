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
//!   through `Guarded` with an owned `apply` (`update_owned`, as `Limits` calls it
//!   for any limit but a one-part GCRA).
//! - limit-store `Limits::attempt` on a one-part GCRA with a budget no run
//!   reaches (3,600,000 an hour, one a ms: the finest a GCRA takes), on a
//!   `RedisStore` of its own: the count a site makes, in one short script on
//!   the key's integer (the store's integer counts).
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
//! - With `--cluster URL` (a `redis+cluster://` URL; bench/redis.sh passes
//!   the local 3-primary cluster's), at 8 and 32 callers: `RedisStore` on the
//!   cluster counting one key (one slot) and two keys (two slots, as
//!   `sign-in` counts an account and an IP), the same two-key count on the one
//!   server beside it, and `RateLimiterRedis` on an ioredis `Cluster`. Each
//!   of these has a store (and keys) of its own, so that none crowds another's
//!   keys out of the memory of the entries it last wrote. Their rounds follow
//!   the one server's (set up then, so that their stores' background work
//!   does not run on this thread during the one server's points).
//! - Like for like beside the cluster (in the same rounds): the local cluster
//!   has a replica per primary on the same cores, so each of its writes is
//!   applied twice, and the one server has none. With `--replicated URL` (a
//!   server with one replica: `.ci/redis-topologies pair`), the one-key and
//!   two-key counts on it; with `--bare-cluster URL` (a cluster with no
//!   replica: `.ci/redis-topologies cluster … --replicas 0`), the one-slot
//!   and two-slot counts there, and the one server's one-key count in these
//!   rounds. Each is set beside its match in the ratios.
//! - With `--stats`, after each store point, its figures per count: counts
//!   per script call, the servers' script time and CPU, this process's CPU
//!   (stats.rs).
//!
//! Run everything with `bash bench/redis.sh`, or `cargo bench --bench redis
//! --features redis -- [--secs 4] [--warmup 1] [--rounds 2] [--callers 1,8,32]
//! [--fresh] [--remember N] [--threads N] [--no-node] [--no-limitador] [--no-incr]
//! [--cluster URL] [--replicated URL] [--bare-cluster URL] [--min-acked N] [--stats]
//! [--only TEXT]` (N: `min_replicas_acked` of the stores on the cluster and on the
//! replicated server, 0 by default; TEXT: only the rows whose name holds it,
//! as for a profile of one contender). Server: `LIMIT_STORE_BENCH_REDIS`
//! (default redis://127.0.0.1:6379). Every key the bench writes has an
//! expiry; only `redis-benchmark`'s `lsbench:incr:*` keys have none, and
//! bench/redis.sh removes them after the run.

#[path = "../common/args.rs"]
mod args;
mod cluster;
mod drive;
#[path = "../common/figures.rs"]
mod figures;
#[path = "../common/keys.rs"]
mod keys;
mod peers;
mod stats;
mod table;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _, Result};
use limit_store::{Entry, Guarded, LimitStore, Millis, RedisStore, Write};

use self::args::{parse_args, Timing};
use self::drive::{prefill, How, Keys};
use self::figures::median;
use self::keys::keys;
pub(crate) use self::keys::Rng;
use self::peers::{Contender, Runner};
use self::stats::Probe;
use self::table::{print_table, Point};

pub(crate) const KEY_COUNT: usize = 100_000;
pub(crate) const HOUR_MS: Millis = 3_600_000;
pub(crate) const MINUTE_MS: Millis = 60_000;
pub(crate) const STORE: &str = "limit-store `RedisStore`";
pub(crate) const GUARDED: &str = "limit-store `Guarded<RedisStore>`";
pub(crate) const ATTEMPT: &str = "limit-store `Limits::attempt`, GCRA (integer script)";
pub(crate) const FRESH: &str = "limit-store `RedisStore`, new keys";
pub(crate) const RLF: &str = "rate-limiter-flexible `RateLimiterRedis`";
pub(crate) const LIMITADOR: &str = "limitador `AsyncRedisStorage`";
pub(crate) const INCR: &str = "`redis-benchmark` INCR (ceiling)";
pub(crate) const PAIR: &str = "limit-store `RedisStore`, two keys";
pub(crate) const CLUSTER1: &str = "limit-store `RedisStore`, cluster, one slot";
pub(crate) const CLUSTER2: &str = "limit-store `RedisStore`, cluster, two slots";
pub(crate) const RLF_CLUSTER: &str = "rate-limiter-flexible `RateLimiterRedis`, cluster";
pub(crate) const ONE_KEY: &str = "limit-store `RedisStore`, one key, in the cluster's rounds";
pub(crate) const REPLICATED1: &str = "limit-store `RedisStore`, one server with a replica, one key";
pub(crate) const REPLICATED2: &str = "limit-store `RedisStore`, one server with a replica, two keys";
pub(crate) const BARE1: &str = "limit-store `RedisStore`, cluster without replicas, one slot";
pub(crate) const BARE2: &str = "limit-store `RedisStore`, cluster without replicas, two slots";

pub(crate) struct Opts {
    pub(crate) timing: Timing,
    pub(crate) fresh: bool,
    pub(crate) node: bool,
    pub(crate) limitador: bool,
    pub(crate) incr: bool,
    /// The store's `remember` (keys whose last entry it keeps, to count them
    /// in one round trip); `None`: the store's default.
    pub(crate) remember: Option<usize>,
    /// tokio's threads for limit-store's callers: 1 (a current-thread
    /// runtime, as Node's one event loop runs rate-limiter-flexible) or more.
    pub(crate) threads: usize,
    pub(crate) url: String,
    /// A `redis+cluster://` URL: the cluster rows.
    pub(crate) cluster: Option<String>,
    /// A server with one replica: the cluster's like-for-like rows.
    pub(crate) replicated: Option<String>,
    /// A `redis+cluster://` URL of a cluster without replicas: its rows.
    pub(crate) bare_cluster: Option<String>,
    /// `min_replicas_acked` of the stores on the cluster and on the replicated server.
    pub(crate) min_acked: u32,
    /// `--stats`: each store point's figures per count (stats.rs).
    pub(crate) stats: bool,
    /// `--only TEXT`: only the rows whose name holds it.
    pub(crate) only: Option<String>,
}

impl Opts {
    pub(crate) fn parse() -> Result<Opts> {
        let mut o = Opts {
            timing: Timing { secs: 4.0, warmup: 1.0, rounds: 2, callers: vec![1, 8, 32] },
            fresh: false,
            node: true,
            limitador: true,
            incr: true,
            remember: None,
            threads: 1,
            url: std::env::var("LIMIT_STORE_BENCH_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
            cluster: None,
            replicated: None,
            bare_cluster: None,
            min_acked: 0,
            stats: false,
            only: None,
        };
        parse_args(&mut o.timing, |flag, value| {
            match flag {
                "--fresh" => o.fresh = true,
                "--no-node" => o.node = false,
                "--no-limitador" => o.limitador = false,
                "--no-incr" => o.incr = false,
                "--remember" => o.remember = Some(value()?.parse()?),
                "--threads" => o.threads = value()?.parse()?,
                "--cluster" => o.cluster = Some(value()?),
                "--replicated" => o.replicated = Some(value()?),
                "--bare-cluster" => o.bare_cluster = Some(value()?),
                "--min-acked" => o.min_acked = value()?.parse()?,
                "--stats" => o.stats = true,
                "--only" => o.only = Some(value()?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(o)
    }

    /// Whether the row `name` runs (`--only`).
    pub(crate) fn runs(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|only| name.contains(only))
    }
}

/// The fixed-window count: `n + 1` with the entry's expiry, or 1 with `window` to live.
pub(crate) fn count(current: &[Option<Entry>], now: Millis, window: Millis) -> (Vec<Write>, u64) {
    let (n, expires_at) = match &current[0] {
        Some(e) => (e.value.as_u64().unwrap_or(0), e.expires_at),
        None => (0, now + window),
    };
    (vec![Write::Put(Entry { value: (n + 1).into(), expires_at })], n + 1)
}

/// The fixed-window count of every key of `current` at once.
pub(crate) fn count_all(current: &[Option<Entry>], now: Millis, window: Millis) -> Vec<Write> {
    current.iter().flat_map(|e| count(std::slice::from_ref(e), now, window).0).collect()
}

/// With `--stats`, the servers behind `url`.
async fn probe(o: &Opts, url: &str) -> Result<Option<Probe>> {
    Ok(if o.stats { Some(Probe::new(url).await.with_context(|| format!("--stats on {url}"))?) } else { None })
}

/// Every round of `contenders` at each of `callers`, their figures added to `res`.
async fn rounds(
    contenders: &mut [Contender],
    keys: &Arc<Vec<String>>,
    o: &Opts,
    callers: &[usize],
    res: &mut Vec<Point>,
) {
    for round in 1..=o.timing.rounds {
        eprintln!(" round {round}/{}", o.timing.rounds);
        for &c in callers {
            for k in contenders.iter_mut() {
                let last = res.iter().find(|p| p.name == k.name && p.callers == c).map(|p| median(&p.rounds));
                match k.point(keys, c, o, last).await {
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
}

fn main() -> Result<()> {
    let o = Opts::parse()?;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rt = match o.threads {
        0 | 1 => tokio::runtime::Builder::new_current_thread().enable_all().build()?,
        n => tokio::runtime::Builder::new_multi_thread().worker_threads(n).enable_all().build()?,
    };
    rt.block_on(async {
        let began = Instant::now();
        let keys = Arc::new(keys(KEY_COUNT));
        let mut contenders = Vec::new();

        if [STORE, GUARDED, ATTEMPT].iter().any(|name| o.runs(name)) || (o.fresh && o.runs(FRESH)) {
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
            prefill(bare.clone(), keys.clone(), Keys::Live, How::Update).await.context("limit-store's fill")?;
            contenders.push(Contender {
                name: STORE,
                runner: Runner::Store {
                    store: bare.clone(),
                    redis: store.clone(),
                    keys: Keys::Live,
                    list: None,
                    how: How::Update,
                    probe: probe(&o, &o.url).await?,
                },
            });
            let guarded: Arc<dyn LimitStore> = Arc::new(Guarded::new(store.clone()));
            contenders.push(Contender {
                name: GUARDED,
                runner: Runner::Store {
                    store: guarded,
                    redis: store.clone(),
                    keys: Keys::Live,
                    list: None,
                    how: How::Owned,
                    probe: probe(&o, &o.url).await?,
                },
            });
            if o.runs(ATTEMPT) {
                // A store of its own, as a site's `Limits` has: its GCRA's
                // keys (`bench:client:…`) are not the other rows'.
                let own = Arc::new(builder.clone().connect().await?);
                let limits = drive::limits(own.clone())?;
                let how = How::Attempt(limits);
                prefill(own.clone(), keys.clone(), Keys::Live, how.clone()).await.context("Limits' fill")?;
                let runner = Runner::Store {
                    store: own.clone(),
                    redis: own,
                    keys: Keys::Live,
                    list: None,
                    how,
                    probe: probe(&o, &o.url).await?,
                };
                contenders.push(Contender { name: ATTEMPT, runner });
            }
            if o.fresh {
                // A store of its own: the new keys it remembers would otherwise
                // push the live keys out of the other rows' store's memory, and
                // their counts would take two round trips.
                let fresh = Arc::new(builder.connect().await?);
                contenders.push(Contender {
                    name: FRESH,
                    runner: Runner::Store {
                        store: fresh.clone(),
                        redis: fresh,
                        keys: Keys::Fresh,
                        list: None,
                        how: How::Update,
                        probe: probe(&o, &o.url).await?,
                    },
                });
            }
        }
        if o.node && o.runs(RLF) {
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
        if o.limitador && o.runs(LIMITADOR) {
            eprintln!("limitador: starting, counting every key once");
            let dir = root.join("bench").join("limitador");
            let bin = dir.join("target").join("release").join("limit-store-bench-limitador");
            if !bin.exists() {
                bail!("build {} first (bash bench/redis.sh does), or pass --no-limitador", bin.display());
            }
            contenders.push(Contender::child(LIMITADOR, &dir, bin.to_str().context("path")?, &["--url", &o.url])?);
        }
        if o.incr && o.runs(INCR) {
            contenders.push(Contender { name: INCR, runner: Runner::Incr });
        }
        contenders.retain(|k| o.runs(k.name));
        // Rounds: for each caller count, every contender in turn, so a slow
        // spell of the shared machine hits all of them.
        let mut res: Vec<Point> = Vec::new();
        rounds(&mut contenders, &keys, &o, &o.timing.callers, &mut res).await;
        // The cluster rows after the one server's: their stores' background
        // work (the bound's first count on every primary) runs on this one
        // thread and would slow the one server's points, a lone caller most.
        if let Some(cluster) = &o.cluster {
            let mut more = cluster::contenders(&o, cluster, &keys, root).await?;
            let many: Vec<usize> = o.timing.callers.iter().copied().filter(|&c| c >= 8).collect();
            rounds(&mut more, &keys, &o, &many, &mut res).await;
            contenders.extend(more);
        }
        let names: Vec<&'static str> = contenders.iter().map(|k| k.name).collect();
        drop(contenders);
        print_table(&o, &res, &names);
        eprintln!("took {:.0} s", began.elapsed().as_secs_f64());
        Ok(())
    })
}
