//! `DatabaseStore` counting requests, side by side with the database's own
//! ceiling and with two peers, in one run. See BENCHMARKS.md, "Database store".
//!
//! Every contender counts one request per op, the way a fixed-window limit
//! does, against a key drawn uniformly from the same 100,000 keys, with C
//! concurrent callers (tokio tasks; promises for the Node peer) for C in 1, 8
//! and 32, each point a fixed time after a warm-up. Before its points, each
//! contender's table is rebuilt and filled with a live row for every key (bulk
//! SQL, or batched counts for runlimit; not timed), so every measured count
//! updates an existing row.
//!
//! - SQLite: limit-store; a raw sqlx loop of the store's transaction (same
//!   pool and driver, no store); a raw rusqlite loop of it (blocking threads).
//! - PostgreSQL and MariaDB, issue 15's aim: limit-store with a new store per
//!   point (it has not seen the rows it counts), and three processes of this
//!   bench, each such a store, counting the same keys at once, as three
//!   instances would; beside rate-limiter-flexible in one Node process and
//!   in three. Three processes share a point's callers (at least one each).
//! - PostgreSQL: limit-store; raw sqlx loops of the locked and the optimistic
//!   shape, and of the optimistic shape on one connection per count without
//!   sqlx's ping on every acquire; `pgbench` running
//!   `bench/pgbench/{locked,optimistic}.sql`; runlimit-postgres;
//!   rate-limiter-flexible's `RateLimiterPostgres` (`node bench/node/rlf.js`).
//! - MariaDB/MySQL: limit-store; the same three raw sqlx loops;
//!   rate-limiter-flexible's `RateLimiterMySQL`. No pgbench exists for it.
//! - Size: limit-store at 8 callers (SQLite: 1) over 10,000 keys with the
//!   table holding 10,000 rows, then 1,000,000 rows.
//!
//! Run everything with `bash bench/database.sh`, or
//! `cargo bench --features sqlite,postgres,mysql --bench database -- [--secs 4] [--warmup 1] [--callers 1,8,32]
//! [--rounds 3] [--only sqlite,postgres,mysql,size] [--no-node] [--no-pgbench]
//! [--no-runlimit] [--no-raw]` (`--no-raw`: no raw loops on PostgreSQL and
//! MariaDB).
//! limit-store's commits do not wait for the disk, its default;
//! `LIMIT_STORE_BENCH_DURABLE=1` makes them wait, as rate-limiter-flexible's
//! do, and `LIMIT_STORE_BENCH_RLF_ASYNC=1` makes rate-limiter-flexible's on
//! PostgreSQL not wait either: the two like-for-like comparisons.
//! URLs: `LIMIT_STORE_BENCH_POSTGRES`, `LIMIT_STORE_BENCH_MYSQL` (defaults:
//! the local test servers).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use limit_store::{update_with, DatabaseStore, Entry, LimitStore, Millis, Write};
use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, Row};

#[path = "../common/args.rs"]
mod args;
mod databases;
#[path = "../common/figures.rs"]
mod figures;
#[path = "../common/keys.rs"]
mod keys;
mod peers;
mod procs;
mod raw;
mod store;
mod table;

use args::{parse_args, Timing};
use databases::*;
use figures::{fmt_rate, median};
use keys::{keys, Rng};
use peers::*;
use procs::*;
use raw::*;
use store::*;
use table::*;

const SECRET: &str = "limit-store database bench secret, 32+ bytes long";
const KEY_COUNT: usize = 100_000;
const SIZE_KEYS: usize = 10_000;
const SIZE_BIG: u64 = 1_000_000;
const WINDOW_MS: Millis = 60_000;
/// Pre-filled rows stay live this long: the whole run.
const PREFILL_LIVE_MS: i64 = 3_600_000;

const T_STORE: &str = "limit_store_bench";
/// The new-store-per-point contender's own table: its writes must not make
/// the long-lived store's remembered rows stale.
const T_STORE_NEW: &str = "limit_store_bench_new";
/// The three-process contender's table, for the same reason.
const T_STORE_THREE: &str = "limit_store_bench_three";
const T_RAW: &str = "limit_store_bench_raw";
const T_SIZE_S: &str = "limit_store_bench_size_10k";
const T_SIZE_L: &str = "limit_store_bench_size_1m";
/// The raw rusqlite loop's tables for the size control (SQLite).
const T_SIZE_RAW_S: &str = "limit_store_bench_size_raw_10k";
const T_SIZE_RAW_L: &str = "limit_store_bench_size_raw_1m";
const T_RLF: &str = "limit_store_bench_rlf";
const RUNLIMIT_SCHEMA: &str = "limit_store_bench_runlimit";

const PG_NOW: &str = "(extract(epoch from clock_timestamp()) * 1000)::int8";
const MY_NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";
const LITE_NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

type BoxFut = Pin<Box<dyn Future<Output = Result<()>> + Send>>;
/// One count on key `i` (an index into the key list).
type Op = Arc<dyn Fn(usize) -> BoxFut + Send + Sync>;

// ---------------------------------------------------------------- settings

struct Opts {
    timing: Timing,
    only: Vec<String>,
    node: bool,
    pgbench: bool,
    runlimit: bool,
    raw: bool,
    pg: String,
    my: String,
    dir: PathBuf,
}

impl Opts {
    fn parse() -> Result<Opts> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut o = Opts {
            timing: Timing { secs: 4.0, warmup: 1.0, rounds: 3, callers: vec![1, 8, 32] },
            only: vec!["sqlite".into(), "postgres".into(), "mysql".into(), "size".into()],
            node: true,
            pgbench: true,
            runlimit: true,
            raw: true,
            pg: std::env::var("LIMIT_STORE_BENCH_POSTGRES")
                .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into()),
            my: std::env::var("LIMIT_STORE_BENCH_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
            dir: root.join("target").join("limit-store-bench"),
        };
        parse_args(&mut o.timing, |flag, value| {
            match flag {
                "--only" => o.only = value()?.split(',').map(str::to_owned).collect(),
                "--no-node" => o.node = false,
                "--no-pgbench" => o.pgbench = false,
                "--no-runlimit" => o.runlimit = false,
                "--no-raw" => o.raw = false,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        std::fs::create_dir_all(&o.dir)?;
        Ok(o)
    }
    fn wants(&self, what: &str) -> bool {
        self.only.iter().any(|o| o == what)
    }
}

// ---------------------------------------------------------------- keys

/// The raw loops' row names: SHA-256 of the decimal `k`, for `k` in
/// 1..=100,000, exactly what the pgbench scripts compute for `:k`.
fn raw_hashes() -> Vec<[u8; 32]> {
    (1..=KEY_COUNT).map(|k| Sha256::digest(k.to_string().as_bytes()).into()).collect()
}

// ---------------------------------------------------------------- driver

/// Runs `callers` tasks, each counting on random keys one at a time, for
/// `warmup` then `secs`; answers counts per second over the measured part
/// and the errors seen then (the first is printed).
async fn drive(op: Op, n_keys: usize, callers: usize, warmup: f64, secs: f64) -> (f64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|c| {
            let (op, done, errors, stop) = (op.clone(), done.clone(), errors.clone(), stop.clone());
            tokio::spawn(async move {
                let mut rng = Rng::for_caller(c);
                while !stop.load(Ordering::Relaxed) {
                    match op(rng.next(n_keys)).await {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("  error: {e:#}");
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
    ((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), e1 - e0)
}

type BoxOp = Pin<Box<dyn Future<Output = Result<Op>> + Send>>;
/// Builds a contender's op with a pool of the given size: each point opens
/// its own pool and drops it after, so idle connections of other contenders
/// never crowd the server's connection limit.
type MakeOp = Arc<dyn Fn(u32) -> BoxOp + Send + Sync>;

/// How a contender runs one point.
enum Runner {
    /// In this process: `drive` over `keys` keys.
    Op { make: MakeOp, keys: usize },
    /// rusqlite on blocking threads, on `table`.
    Rusqlite { path: PathBuf, table: &'static str, hashes: Arc<Vec<[u8; 32]>> },
    /// One `pgbench` run per point.
    Pgbench { url: String, script: PathBuf },
    /// Processes that count at once, each told one point per stdin line (see
    /// `procs.rs`): `node bench/node/rlf.js --serve 1`, or this bench as a
    /// store of its own; `callers` in all, split among them.
    Procs(Procs),
}

struct Contender {
    db: &'static str,
    name: String,
    runner: Runner,
}

impl Contender {
    async fn point(&mut self, callers: usize, warmup: f64, secs: f64) -> Result<(f64, u64)> {
        match &mut self.runner {
            Runner::Op { make, keys } => {
                let op = make(u32::try_from(callers)?).await?;
                Ok(drive(op, *keys, callers, warmup, secs).await)
            }
            Runner::Rusqlite { path, table, hashes } => {
                let (path, table, hashes) = (path.clone(), *table, hashes.clone());
                tokio::task::spawn_blocking(move || lite_rusqlite(&path, table, hashes, callers, warmup, secs)).await?
            }
            Runner::Pgbench { url, script } => pgbench(url, script, callers, warmup, secs),
            Runner::Procs(procs) => procs.point(callers, warmup, secs),
        }
    }
}

/// One figure of the table: counts/s of every round.
struct Point {
    db: &'static str,
    contender: String,
    callers: usize,
    rounds: Vec<f64>,
    errors: u64,
}

struct Results(Vec<Point>);

impl Results {
    fn add(&mut self, db: &'static str, contender: &str, callers: usize, per_sec: f64, errors: u64) {
        eprintln!(
            "  {db:<10} {contender:<48} C={callers:<3} {per_sec:>9.0}/s{}",
            if errors > 0 { format!("  ({errors} errors)") } else { String::new() }
        );
        match self.0.iter_mut().find(|p| p.db == db && p.contender == contender && p.callers == callers) {
            Some(p) => {
                p.rounds.push(per_sec);
                p.errors += errors;
            }
            None => self.0.push(Point { db, contender: contender.to_owned(), callers, rounds: vec![per_sec], errors }),
        }
    }

    /// `rounds` times: for each caller count, every contender in turn. Side
    /// by side in time, so a slow spell of the shared machine hits all.
    async fn rounds(&mut self, o: &Opts, contenders: &mut [Contender], callers: &[usize]) {
        for round in 1..=o.timing.rounds {
            eprintln!(" round {round}/{}", o.timing.rounds);
            for &c in callers {
                for k in contenders.iter_mut() {
                    match k.point(c, o.timing.warmup, o.timing.secs).await {
                        Ok((r, e)) => self.add(k.db, &k.name, c, r, e),
                        Err(e) => eprintln!("  {} {} C={c}: {e:#}", k.db, k.name),
                    }
                }
            }
        }
    }
}

fn op_contender(db: &'static str, name: &str, keys: usize, make: MakeOp) -> Contender {
    Contender { db, name: name.to_owned(), runner: Runner::Op { make, keys } }
}

fn main() -> Result<()> {
    if let Some(child) = StoreChild::from_args() {
        return child.serve();
    }
    let o = Opts::parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let keys = Arc::new(keys(KEY_COUNT));
        let mut res = Results(Vec::new());
        let began = Instant::now();
        if o.wants("sqlite") {
            run_sqlite(&o, &mut res, &keys).await.context("SQLite")?;
        }
        if o.wants("postgres") {
            run_postgres(&o, &mut res, &keys).await.context("PostgreSQL")?;
        }
        if o.wants("mysql") {
            run_mysql(&o, &mut res, &keys).await.context("MariaDB")?;
        }
        if o.wants("size") {
            run_size(&o, &mut res, &keys).await.context("size")?;
        }
        print_tables(&o, &res);
        eprintln!("took {:.0} s", began.elapsed().as_secs_f64());
        Ok(())
    })
}
