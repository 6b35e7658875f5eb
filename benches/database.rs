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
//! `cargo bench --bench database -- [--secs 4] [--warmup 1] [--callers 1,8,32]
//! [--rounds 3] [--only sqlite,postgres,mysql,size] [--no-node] [--no-pgbench]
//! [--no-runlimit]`.
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
use limit_store::keys::Secret;
use limit_store::{update_with, DatabaseStore, Entry, Millis, Write};
use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, Row};

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
    secs: f64,
    warmup: f64,
    rounds: usize,
    callers: Vec<usize>,
    only: Vec<String>,
    node: bool,
    pgbench: bool,
    runlimit: bool,
    pg: String,
    my: String,
    dir: PathBuf,
}

impl Opts {
    fn parse() -> Result<Opts> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut o = Opts {
            secs: 4.0,
            warmup: 1.0,
            rounds: 3,
            callers: vec![1, 8, 32],
            only: vec!["sqlite".into(), "postgres".into(), "mysql".into(), "size".into()],
            node: true,
            pgbench: true,
            runlimit: true,
            pg: std::env::var("LIMIT_STORE_BENCH_POSTGRES")
                .unwrap_or_else(|_| "postgres://root@127.0.0.1:5432/test".into()),
            my: std::env::var("LIMIT_STORE_BENCH_MYSQL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into()),
            dir: root.join("target").join("limit-store-bench"),
        };
        let mut args = std::env::args().skip(1);
        while let Some(a) = args.next() {
            let mut value = || args.next().context(format!("{a} needs a value"));
            match a.as_str() {
                "--secs" => o.secs = value()?.parse()?,
                "--warmup" => o.warmup = value()?.parse()?,
                "--rounds" => o.rounds = value()?.parse()?,
                "--callers" => o.callers = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
                "--only" => o.only = value()?.split(',').map(str::to_owned).collect(),
                "--no-node" => o.node = false,
                "--no-pgbench" => o.pgbench = false,
                "--no-runlimit" => o.runlimit = false,
                "--bench" => {} // cargo bench passes it
                other => bail!("unknown argument {other:?}"),
            }
        }
        std::fs::create_dir_all(&o.dir)?;
        Ok(o)
    }
    fn wants(&self, what: &str) -> bool {
        self.only.iter().any(|o| o == what)
    }
}

// ---------------------------------------------------------------- keys

/// `user:` + 16 hex digits of SHA-256 of the index: 100,000 random-looking
/// strings, 21 bytes each; `bench/node/rlf.js` builds the same list.
fn keys() -> Vec<String> {
    (0..KEY_COUNT)
        .map(|i| {
            let d = Sha256::digest(i.to_string().as_bytes());
            let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("user:{hex}")
        })
        .collect()
}

/// The raw loops' row names: SHA-256 of the decimal `k`, for `k` in
/// 1..=100,000, exactly what the pgbench scripts compute for `:k`.
fn raw_hashes() -> Vec<[u8; 32]> {
    (1..=KEY_COUNT).map(|k| Sha256::digest(k.to_string().as_bytes()).into()).collect()
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
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x2545_F491_4F6C_DD1D));
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
    /// `node bench/node/rlf.js --serve 1`, one stdin line per point.
    Node { child: std::process::Child, out: std::io::BufReader<std::process::ChildStdout> },
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
            Runner::Node { child, out } => {
                use std::io::{BufRead, Write as _};
                let stdin = child.stdin.as_mut().context("node stdin")?;
                writeln!(stdin, "{callers} {warmup} {secs}")?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                let v: serde_json::Value = serde_json::from_str(&line).context(format!("rlf.js said {line:?}"))?;
                let per_sec = v["counts"].as_f64().context("counts")? / v["secs"].as_f64().context("secs")?;
                Ok((per_sec, v["errors"].as_u64().unwrap_or(0)))
            }
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if let Runner::Node { child, .. } = &mut self.runner {
            drop(child.stdin.take()); // end of input: rlf.js closes its pool and exits
            let _ = child.wait();
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
        for round in 1..=o.rounds {
            eprintln!(" round {round}/{}", o.rounds);
            for &c in callers {
                for k in contenders.iter_mut() {
                    match k.point(c, o.warmup, o.secs).await {
                        Ok((r, e)) => self.add(k.db, &k.name, c, r, e),
                        Err(e) => eprintln!("  {} {} C={c}: {e:#}", k.db, k.name),
                    }
                }
            }
        }
    }
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

fn op_contender(db: &'static str, name: &str, keys: usize, make: MakeOp) -> Contender {
    Contender { db, name: name.to_owned(), runner: Runner::Op { make, keys } }
}

// ---------------------------------------------------------------- limit-store

/// The fixed-window count: read `n` (a bare JSON number), write `n + 1` with
/// the entry's expiry, or 1 with a new 60 s window.
fn count(current: &[Option<Entry>], now: Millis) -> (Vec<Write>, u64) {
    let (n, expires_at) = match &current[0] {
        Some(e) => (e.value.as_u64().unwrap_or(0), e.expires_at),
        None => (0, now + WINDOW_MS),
    };
    (vec![Write::Put(Entry { value: (n + 1).into(), expires_at })], n + 1)
}

async fn store(url: &str, table: &str, pool: u32, max_entries: u64) -> Result<DatabaseStore> {
    store_in_place(url, table, pool, max_entries, false).await
}

/// [`store`], with SQLite's counts run on the caller's thread or not.
async fn store_in_place(url: &str, table: &str, pool: u32, max_entries: u64, in_place: bool) -> Result<DatabaseStore> {
    Ok(DatabaseStore::builder(url)
        .table(table)
        .secret(SECRET)
        .max_connections(pool)
        .max_entries(max_entries)
        .sweep_every(None)
        .sqlite_in_place(in_place)
        .connect()
        .await?)
}

fn store_op(s: DatabaseStore, keys: Arc<Vec<String>>) -> Op {
    Arc::new(move |i| {
        let (s, keys) = (s.clone(), keys.clone());
        Box::pin(async move {
            update_with(&s, &[keys[i].as_str()], count).await?;
            Ok(())
        })
    })
}

/// One store on `table` for the whole run, as an app keeps one: its pool has
/// room for the most callers, and it remembers the rows it counted across
/// points. Before the first point it counts every key once, untimed, as an
/// app that has run for a while has; before each point it says how its
/// counts went so far.
fn store_for_run(url: &str, table: &'static str, keys: Arc<Vec<String>>, in_place: bool) -> MakeOp {
    let url = url.to_owned();
    let once = Arc::new(tokio::sync::OnceCell::new());
    Arc::new(move |_| {
        let (url, keys, once) = (url.clone(), keys.clone(), once.clone());
        Box::pin(async move {
            let s: &DatabaseStore = once
                .get_or_try_init(|| async {
                    let s = store_in_place(&url, table, 32, 2 * SIZE_BIG, in_place).await?;
                    let next = Arc::new(AtomicUsize::new(0));
                    let tasks: Vec<_> = (0..32)
                        .map(|_| {
                            let (s, keys, next) = (s.clone(), keys.clone(), next.clone());
                            tokio::spawn(async move {
                                loop {
                                    let i = next.fetch_add(1, Ordering::Relaxed);
                                    let Some(key) = keys.get(i) else { return Ok::<_, anyhow::Error>(()) };
                                    update_with(&s, &[key.as_str()], count).await?;
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await??;
                    }
                    Ok::<_, anyhow::Error>(s)
                })
                .await?;
            let p = s.count_paths();
            eprintln!(
                "    (the store's counts so far: {} in one statement, {} read then written, {} locked; {} batched)",
                p.one_statement, p.read_then_write, p.locked, p.batched
            );
            Ok(store_op(s.clone(), keys))
        })
    })
}

/// A store on `table` per point, with a pool of the point's size.
fn store_make(url: &str, table: &'static str, keys: Arc<Vec<String>>) -> MakeOp {
    let url = url.to_owned();
    Arc::new(move |pool| {
        let (url, keys) = (url.clone(), keys.clone());
        Box::pin(async move { Ok(store_op(store(&url, table, pool, 2 * SIZE_BIG).await?, keys)) })
    })
}

/// Drops `table` (and its migration log) and creates it again through the
/// store's own migration.
async fn fresh_table(url: &str, table: &str) -> Result<()> {
    let drop = [format!("DROP TABLE IF EXISTS {table}"), format!("DROP TABLE IF EXISTS {table}_migrations")];
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    }
    DatabaseStore::builder(url).table(table).migrate().await?;
    Ok(())
}

/// Inserts a live row (value `1`, an hour to live on the database's clock)
/// for each hash, in batches.
async fn prefill(url: &str, table: &str, hashes: &[[u8; 32]], generation: i64) -> Result<()> {
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        for chunk in hashes.chunks(10_000) {
            let ks: Vec<Vec<u8>> = chunk.iter().map(|h| h.to_vec()).collect();
            sqlx::query(&format!(
                "INSERT INTO {table} (key_hash, generation, value, expires_at) \
                 SELECT k, $2, '1', {PG_NOW} + {PREFILL_LIVE_MS} FROM unnest($1::bytea[]) AS k \
                 ON CONFLICT DO NOTHING"
            ))
            .bind(ks)
            .bind(generation)
            .execute(&mut c)
            .await?;
        }
        c.execute(format!("VACUUM ANALYZE {table}").as_str()).await?;
        // Start every contender right after a checkpoint, so none pays more
        // full-page writes than another for the fill (needs superuser; skipped without).
        let _ = c.execute("CHECKPOINT").await;
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        for chunk in hashes.chunks(2_000) {
            let rows = vec![format!("(?, ?, '1', {MY_NOW} + {PREFILL_LIVE_MS})"); chunk.len()].join(", ");
            let sql = format!("INSERT IGNORE INTO {table} (key_hash, generation, value, expires_at) VALUES {rows}");
            let mut q = sqlx::query(&sql);
            for h in chunk {
                q = q.bind(&h[..]).bind(generation);
            }
            q.execute(&mut c).await?;
        }
        c.execute(format!("ANALYZE TABLE {table}").as_str()).await?;
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        let mut tx = c.begin().await?;
        let sql = format!(
            "INSERT OR IGNORE INTO {table} (key_hash, generation, value, expires_at) \
             VALUES (?, ?, '1', {LITE_NOW} + {PREFILL_LIVE_MS})"
        );
        for h in hashes {
            sqlx::query(&sql).bind(&h[..]).bind(generation).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// Fresh `table` with a live row for each of `keys` under the bench's secret.
async fn prepare_store_table(url: &str, table: &str, keys: &[String]) -> Result<i64> {
    fresh_table(url, table).await?;
    let secret = Secret::new(SECRET)?;
    let hashes: Vec<[u8; 32]> = keys.iter().map(|k| secret.key_hash(k)).collect();
    prefill(url, table, &hashes, secret.generation()).await?;
    Ok(secret.generation())
}

// ---------------------------------------------------------------- raw loops

/// The count the raw loops compute: `n + 1` over the row's value, keeping a
/// live expiry or opening a new window.
fn next_value(value: Option<&str>, expires_at: i64, now: i64) -> (String, i64) {
    if expires_at > now {
        let n: u64 = value.and_then(|v| v.parse().ok()).unwrap_or(0);
        ((n + 1).to_string(), expires_at)
    } else {
        ("1".to_owned(), now + WINDOW_MS)
    }
}

/// PostgreSQL, the locked shape of `postgres.rs`: BEGIN; lock-or-create the
/// row with `INSERT … ON CONFLICT DO UPDATE … RETURNING` (with the clock);
/// write with the `WITH … UPDATE … DELETE` statement; COMMIT.
async fn pg_locked(pool: &sqlx::PgPool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(&format!(
        "INSERT INTO {t} (key_hash, generation, value, expires_at) \
         SELECT k, 0, 'null', 0 FROM unnest($1::bytea[]) AS k ORDER BY k \
         ON CONFLICT (key_hash) DO UPDATE SET value = {t}.value \
         RETURNING key_hash, generation, value, expires_at, {PG_NOW} AS now"
    ))
    .bind(vec![key.to_vec()])
    .fetch_all(&mut *tx)
    .await?;
    let row = rows.first().context("no row")?;
    let now: i64 = row.try_get("now")?;
    let value: String = row.try_get("value")?;
    let (v, e) = next_value(Some(&value), row.try_get("expires_at")?, now);
    sqlx::query(&format!(
        "WITH w(k, v, e) AS (SELECT * FROM unnest($1::bytea[], $2::text[], $3::int8[])), \
         up AS (UPDATE {t} SET generation = $4, value = w.v, expires_at = w.e FROM w \
                WHERE {t}.key_hash = w.k RETURNING 1), \
         del AS (DELETE FROM {t} WHERE key_hash = ANY($5::bytea[]) RETURNING 1) \
         SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del)"
    ))
    .bind(vec![key.to_vec()])
    .bind(vec![v])
    .bind(vec![e])
    .bind(1_i64)
    .bind(Vec::<Vec<u8>>::new())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// PostgreSQL, the optimistic shape: one autocommit read with the clock, one
/// conditional autocommit write; the locked shape when the row changed.
async fn pg_optimistic(pool: &sqlx::PgPool, key: &[u8; 32], one_conn: bool) -> Result<()> {
    let t = T_RAW;
    // `one_conn`: both statements on one connection, acquired once.
    let mut held = if one_conn { Some(pool.acquire().await?) } else { None };
    let read_sql = format!(
        "SELECT {PG_NOW} AS now, t.generation, t.value, t.expires_at \
         FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash = ANY($1::bytea[])"
    );
    let row = sqlx::query(&read_sql).bind(vec![key.to_vec()]);
    let row = match &mut held {
        Some(c) => row.fetch_one(&mut **c).await?,
        None => row.fetch_one(pool).await?,
    };
    let now: i64 = row.try_get("now")?;
    let old_v: Option<String> = row.try_get("value")?;
    let (Some(old_v), Some(old_g), Some(old_e)) =
        (old_v, row.try_get::<Option<i64>, _>("generation")?, row.try_get::<Option<i64>, _>("expires_at")?)
    else {
        return pg_locked(pool, key).await;
    };
    let (v, e) = next_value(Some(&old_v), old_e, now);
    let write_sql = format!(
        "UPDATE {t} SET generation = $2, value = $3, expires_at = $4 \
         WHERE key_hash = $1 AND generation = $5 AND value = $6 AND expires_at = $7"
    );
    let done = sqlx::query(&write_sql).bind(&key[..]).bind(1_i64).bind(v).bind(e).bind(old_g).bind(old_v).bind(old_e);
    let done = match &mut held {
        Some(c) => done.execute(&mut **c).await?,
        None => done.execute(pool).await?,
    };
    drop(held);
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        pg_locked(pool, key).await
    }
}

/// MySQL/MariaDB, the locked shape of `mysql.rs`: BEGIN; `INSERT … ON
/// DUPLICATE KEY UPDATE` to lock or create; SELECT the row with the clock;
/// UPDATE; COMMIT (READ COMMITTED, as the store sets).
async fn my_locked(pool: &sqlx::MySqlPool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin().await?;
    sqlx::query(&format!(
        "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, 0, 'null', 0) \
         ON DUPLICATE KEY UPDATE value = value"
    ))
    .bind(&key[..])
    .execute(&mut *tx)
    .await?;
    let row = sqlx::query(&format!(
        "SELECT key_hash, generation, value, expires_at, {MY_NOW} AS now FROM {t} WHERE key_hash IN (?)"
    ))
    .bind(&key[..])
    .fetch_one(&mut *tx)
    .await?;
    let value: String = row.try_get("value")?;
    let (v, e) = next_value(Some(&value), row.try_get("expires_at")?, row.try_get("now")?);
    sqlx::query(&format!("UPDATE {t} SET generation = ?, value = ?, expires_at = ? WHERE key_hash = ?"))
        .bind(1_i64)
        .bind(v)
        .bind(e)
        .bind(&key[..])
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// MySQL/MariaDB, the optimistic shape: autocommit read with the clock, then a
/// conditional UPDATE; the locked shape when it matched nothing.
async fn my_optimistic(pool: &sqlx::MySqlPool, key: &[u8; 32], one_conn: bool) -> Result<()> {
    let t = T_RAW;
    let mut held = if one_conn { Some(pool.acquire().await?) } else { None };
    let read_sql = format!(
        "SELECT {MY_NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
         FROM (SELECT 1 AS one) AS d LEFT JOIN {t} AS t ON t.key_hash IN (?)"
    );
    let row = sqlx::query(&read_sql).bind(&key[..]);
    let row = match &mut held {
        Some(c) => row.fetch_one(&mut **c).await?,
        None => row.fetch_one(pool).await?,
    };
    let now: i64 = row.try_get("now")?;
    let (Some(old_v), Some(old_g), Some(old_e)) = (
        row.try_get::<Option<String>, _>("value")?,
        row.try_get::<Option<i64>, _>("generation")?,
        row.try_get::<Option<i64>, _>("expires_at")?,
    ) else {
        return my_locked(pool, key).await;
    };
    let (v, e) = next_value(Some(&old_v), old_e, now);
    let write_sql = format!(
        "UPDATE {t} SET generation = ?, value = ?, expires_at = ? \
         WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ?"
    );
    let done = sqlx::query(&write_sql).bind(1_i64).bind(v).bind(e).bind(&key[..]).bind(old_g).bind(old_v).bind(old_e);
    let done = match &mut held {
        Some(c) => done.execute(&mut **c).await?,
        None => done.execute(pool).await?,
    };
    drop(held);
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        my_locked(pool, key).await
    }
}

/// SQLite through sqlx, the transaction of `sqlite.rs`: BEGIN IMMEDIATE;
/// SELECT the row with the clock; the value alone when the expiry stays,
/// else the upsert; COMMIT.
async fn lite_sqlx(pool: &sqlx::SqlitePool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let row = sqlx::query(&format!(
        "SELECT {LITE_NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
         FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN (?)"
    ))
    .bind(&key[..])
    .fetch_one(&mut *tx)
    .await?;
    let now: i64 = row.try_get("now")?;
    let old_e: Option<i64> = row.try_get("expires_at")?;
    let (v, e) = match row.try_get::<Option<&str>, _>("value")? {
        Some(v) => next_value(Some(v), old_e.unwrap_or(0), now),
        None => next_value(None, 0, now),
    };
    if old_e == Some(e) {
        sqlx::query(&format!("UPDATE {t} SET value = ? WHERE key_hash = ?"))
            .bind(v)
            .bind(&key[..])
            .execute(&mut *tx)
            .await?;
    } else {
        sqlx::query(&format!(
            "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
             value = excluded.value, expires_at = excluded.expires_at"
        ))
        .bind(&key[..])
        .bind(1_i64)
        .bind(v)
        .bind(e)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The same transaction with rusqlite on `callers` blocking threads, one
/// connection each (WAL, synchronous NORMAL, 1.5 s busy timeout, as the store
/// opens SQLite): the database's own ceiling, no async driver in between.
fn lite_rusqlite(
    path: &Path,
    table: &'static str,
    hashes: Arc<Vec<[u8; 32]>>,
    callers: usize,
    warmup: f64,
    secs: f64,
) -> Result<(f64, u64)> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..callers)
        .map(|c| {
            let (done, errors, stop, hashes) = (done.clone(), errors.clone(), stop.clone(), hashes.clone());
            let path = path.to_owned();
            std::thread::spawn(move || -> Result<()> {
                let mut conn = rusqlite::Connection::open(&path)?;
                conn.busy_timeout(Duration::from_millis(1_500))?;
                conn.pragma_update(None, "journal_mode", "wal")?;
                conn.pragma_update(None, "synchronous", "normal")?;
                let t = table;
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x2545_F491_4F6C_DD1D));
                while !stop.load(Ordering::Relaxed) {
                    let key = &hashes[rng.next(hashes.len())];
                    let one = (|| -> rusqlite::Result<()> {
                        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                        let (now, row): (i64, Option<(String, i64)>) = tx
                            .prepare_cached(&format!(
                                "SELECT {LITE_NOW} AS now, t.value, t.expires_at \
                                 FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN (?)"
                            ))?
                            .query_row([&key[..]], |r| {
                                let v: Option<String> = r.get(1)?;
                                let e: Option<i64> = r.get(2)?;
                                Ok((r.get(0)?, v.zip(e)))
                            })?;
                        let (v, e) = match &row {
                            Some((v, e)) => next_value(Some(v), *e, now),
                            None => next_value(None, 0, now),
                        };
                        if row.as_ref().is_some_and(|(_, old_e)| *old_e == e) {
                            tx.prepare_cached(&format!("UPDATE {t} SET value = ? WHERE key_hash = ?"))?
                                .execute(rusqlite::params![v, &key[..]])?;
                        } else {
                            tx.prepare_cached(&format!(
                                "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
                                 ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
                                 value = excluded.value, expires_at = excluded.expires_at"
                            ))?
                            .execute(rusqlite::params![&key[..], 1_i64, v, e])?;
                        }
                        tx.commit()
                    })();
                    match one {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("  error: {e}");
                            }
                            0
                        }
                    };
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(warmup));
    let (n0, e0, t0) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (n1, e1, t1) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("rusqlite thread panicked")?;
    }
    Ok(((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), e1 - e0))
}

// ---------------------------------------------------------------- peers

/// runlimit-postgres 0.3 `PostgresLimiter::check`, fixed window, limit
/// `MAX_LIMIT`, HMAC key per op, in a schema of its own (its tables and its
/// `_sqlx_migrations` stay out of the test database's public schema). Its
/// table is filled by counting every key once, 32 keys per `check_all`.
async fn runlimit_make(url: &str, keys: Arc<Vec<String>>) -> Result<MakeOp> {
    let mut c = sqlx::PgConnection::connect(url).await?;
    c.execute(format!("DROP SCHEMA IF EXISTS {RUNLIMIT_SCHEMA} CASCADE").as_str()).await?;
    c.execute(format!("CREATE SCHEMA {RUNLIMIT_SCHEMA}").as_str()).await?;
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let options = options.options([("search_path", RUNLIMIT_SCHEMA)]);
    let policy = runlimit_core::FixedWindowPolicy::new(
        runlimit_core::PolicyId::new("bench.requests")?,
        runlimit_core::ScopeId::new("client")?,
        runlimit_core::MAX_LIMIT,
        Duration::from_millis(u64::try_from(PREFILL_LIVE_MS)?),
    )?;
    let hasher = runlimit_core::KeyHasher::new(SECRET.as_bytes())?;
    let limiter = runlimit_postgres::PostgresLimiter::new(
        sqlx::postgres::PgPoolOptions::new().max_connections(8).connect_with(options.clone()).await?,
    );
    limiter.migrate().await?;
    let state = Arc::new((limiter, policy, hasher));
    let chunks: Vec<Vec<usize>> = (0..keys.len()).collect::<Vec<_>>().chunks(32).map(<[usize]>::to_vec).collect();
    let chunks = Arc::new(std::sync::Mutex::new(chunks));
    let fillers: Vec<_> = (0..8)
        .map(|_| {
            let (state, keys, chunks) = (state.clone(), keys.clone(), chunks.clone());
            tokio::spawn(async move {
                loop {
                    let Some(chunk) = chunks.lock().unwrap().pop() else { return Ok::<_, anyhow::Error>(()) };
                    let (limiter, policy, hasher) = &*state;
                    let checks: Vec<_> = chunk
                        .iter()
                        .map(|&i| runlimit_core::Check::new(policy, hasher.hash_for(policy, keys[i].as_bytes())))
                        .collect();
                    limiter.check_all(&checks).await?;
                }
            })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    state.0.pool().close().await;
    // Fresh statistics, as every other contender's table gets after its fill
    // (planned against the empty table, runlimit's statements scan it).
    for t in ["runlimit_fixed_windows", "runlimit_capacity_shards"] {
        c.execute(format!("VACUUM ANALYZE {RUNLIMIT_SCHEMA}.{t}").as_str()).await?;
    }
    let _ = c.execute("CHECKPOINT").await;
    let (policy, hasher) = (Arc::new(state.1.clone()), Arc::new(state.2.clone()));
    Ok(Arc::new(move |size| {
        let (options, policy, hasher, keys) = (options.clone(), policy.clone(), hasher.clone(), keys.clone());
        Box::pin(async move {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(size).connect_with(options).await?;
            let limiter = Arc::new(runlimit_postgres::PostgresLimiter::new(pool));
            let op: Op = Arc::new(move |i| {
                let (limiter, policy, hasher, keys) = (limiter.clone(), policy.clone(), hasher.clone(), keys.clone());
                Box::pin(async move {
                    let subject = hasher.hash_for(&*policy, keys[i].as_bytes());
                    let decision = limiter.check(&runlimit_core::Check::new(&*policy, subject)).await?;
                    if !decision.permits_request() {
                        bail!("runlimit refused a check");
                    }
                    Ok(())
                })
            });
            Ok(op)
        })
    }))
}

/// Starts `node bench/node/rlf.js --serve 1`, which drops, creates and fills
/// its table, and waits for it to say it is ready.
fn rlf(o: &Opts, db: &'static str, which: &str, url: &str) -> Result<Contender> {
    use std::io::BufRead;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench").join("node");
    if !dir.join("node_modules").exists() {
        bail!("run `npm ci` in {} first (bash bench/database.sh does)", dir.display());
    }
    let pool = o.callers.iter().max().copied().unwrap_or(1).to_string();
    let mut child = Command::new("node")
        .current_dir(&dir)
        .args([
            "rlf.js",
            "--db",
            which,
            "--url",
            url,
            "--callers",
            &pool,
            "--keys",
            &KEY_COUNT.to_string(),
            "--table",
            T_RLF,
            "--serve",
            "1",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("run node")?;
    let mut out = std::io::BufReader::new(child.stdout.take().context("node stdout")?);
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        bail!("rlf.js did not start: {line:?}");
    }
    let name = if which == "postgres" {
        "rate-limiter-flexible `RateLimiterPostgres`"
    } else {
        "rate-limiter-flexible `RateLimiterMySQL`"
    };
    Ok(Contender { db, name: name.to_owned(), runner: Runner::Node { child, out } })
}

/// `pgbench -n -M prepared -c C -j min(C, 2) -T secs -f script`, after a run
/// of `warmup` seconds; answers its tps (without connection time) and failures.
fn pgbench(url: &str, script: &Path, callers: usize, warmup: f64, secs: f64) -> Result<(f64, u64)> {
    let run = |t: f64| -> Result<String> {
        let out = Command::new("pgbench")
            .args([
                "-n",
                "-M",
                "prepared",
                "-c",
                &callers.to_string(),
                "-j",
                &callers.min(2).to_string(),
                "-T",
                &format!("{}", t.ceil().max(1.0)),
                "-f",
            ])
            .arg(script)
            .arg(url)
            .output()
            .context("run pgbench")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!("pgbench failed: {}{}", String::from_utf8_lossy(&out.stderr), text);
        }
        Ok(text)
    };
    if warmup > 0.0 {
        run(warmup)?;
    }
    let text = run(secs)?;
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps = ") && l.contains("without initial connection time"))
        .and_then(|l| l.split_whitespace().nth(2))
        .context(format!("no tps in pgbench output: {text}"))?
        .parse()?;
    let failed = text
        .lines()
        .find(|l| l.starts_with("number of failed transactions"))
        .and_then(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok((tps, failed))
}

// ---------------------------------------------------------------- databases

const STORE: &str = "limit-store `DatabaseStore`";
/// A new store per point: it remembers only the rows of its own point.
/// SQLite's counts on the caller's thread.
const IN_PLACE: &str = "limit-store, `sqlite_in_place(true)`";
const STORE_NEW: &str = "limit-store, a new store per point";
/// The optimistic shape on one connection per count, without sqlx's ping on
/// every acquire: what the store's optimistic path could cost.
const LEAN: &str = "raw sqlx loop, optimistic shape, one acquire, no ping";

async fn run_sqlite(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let path = o.dir.join("bench.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let url = format!("sqlite://{}?mode=rwc", path.display());
    eprintln!("SQLite ({})", path.display());
    prepare_store_table(&url, T_STORE, keys).await?;
    fresh_table(&url, T_RAW).await?;
    let hashes = Arc::new(raw_hashes());
    prefill(&url, T_RAW, &hashes, 1).await?;
    let (u, h) = (url.clone(), hashes.clone());
    let raw: MakeOp = Arc::new(move |size| {
        let (u, h) = (u.clone(), h.clone());
        Box::pin(async move {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(size)
                .connect_with(
                    u.parse::<sqlx::sqlite::SqliteConnectOptions>()?
                        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                        .busy_timeout(Duration::from_millis(1_500)),
                )
                .await?;
            let op: Op = Arc::new(move |i| {
                let (pool, h) = (pool.clone(), h.clone());
                Box::pin(async move { lite_sqlx(&pool, &h[i]).await })
            });
            Ok(op)
        })
    });
    let mut contenders = vec![
        op_contender("SQLite", STORE, KEY_COUNT, store_for_run(&url, T_STORE, keys.clone(), false)),
        op_contender("SQLite", IN_PLACE, KEY_COUNT, store_for_run(&url, T_STORE, keys.clone(), true)),
        op_contender("SQLite", "raw sqlx loop, same transaction", KEY_COUNT, raw),
        Contender {
            db: "SQLite",
            name: "raw rusqlite loop, same transaction".into(),
            runner: Runner::Rusqlite { path, table: T_RAW, hashes },
        },
    ];
    res.rounds(o, &mut contenders, &o.callers).await;
    Ok(())
}

/// Raw sqlx loops of both shapes on the shared raw table, each point on a
/// pool of its own; `locked` or optimistic.
fn pg_raw(url: &str, optimistic: bool, lean: bool) -> MakeOp {
    let url = url.to_owned();
    let hashes = Arc::new(raw_hashes());
    Arc::new(move |size| {
        let (url, h) = (url.clone(), hashes.clone());
        Box::pin(async move {
            // `lean`: no ping on every acquire (sqlx's default), both statements on one connection.
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(!lean)
                .connect(&url)
                .await?;
            let op: Op = Arc::new(move |i| {
                let (p, h) = (pool.clone(), h.clone());
                Box::pin(async move {
                    if optimistic {
                        pg_optimistic(&p, &h[i], lean).await
                    } else {
                        pg_locked(&p, &h[i]).await
                    }
                })
            });
            Ok(op)
        })
    })
}

fn my_raw(url: &str, optimistic: bool, lean: bool) -> MakeOp {
    let url = url.to_owned();
    let hashes = Arc::new(raw_hashes());
    Arc::new(move |size| {
        let (url, h) = (url.clone(), hashes.clone());
        Box::pin(async move {
            // The store's session settings: READ COMMITTED, 1 s lock wait.
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(!lean)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                        conn.execute("SET SESSION innodb_lock_wait_timeout = 1").await?;
                        Ok(())
                    })
                })
                .connect(&url)
                .await?;
            let op: Op = Arc::new(move |i| {
                let (p, h) = (pool.clone(), h.clone());
                Box::pin(async move {
                    if optimistic {
                        my_optimistic(&p, &h[i], lean).await
                    } else {
                        my_locked(&p, &h[i]).await
                    }
                })
            });
            Ok(op)
        })
    })
}

async fn run_postgres(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let url = &o.pg;
    eprintln!("PostgreSQL ({url})");
    prepare_store_table(url, T_STORE, keys).await?;
    prepare_store_table(url, T_STORE_NEW, keys).await?;
    // The raw loops and pgbench count on one table of the store's schema.
    fresh_table(url, T_RAW).await?;
    prefill(url, T_RAW, &raw_hashes(), 1).await?;
    let mut contenders = vec![
        op_contender("PostgreSQL", STORE, KEY_COUNT, store_for_run(url, T_STORE, keys.clone(), false)),
        op_contender("PostgreSQL", STORE_NEW, KEY_COUNT, store_make(url, T_STORE_NEW, keys.clone())),
        op_contender("PostgreSQL", "raw sqlx loop, locked shape", KEY_COUNT, pg_raw(url, false, false)),
        op_contender("PostgreSQL", "raw sqlx loop, optimistic shape", KEY_COUNT, pg_raw(url, true, false)),
        op_contender("PostgreSQL", LEAN, KEY_COUNT, pg_raw(url, true, true)),
    ];
    if o.pgbench {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench").join("pgbench");
        for (name, script) in [
            ("pgbench, locked shape", "locked.sql"),
            ("pgbench, optimistic shape", "optimistic.sql"),
            ("pgbench, one-statement shape", "one.sql"),
        ] {
            contenders.push(Contender {
                db: "PostgreSQL",
                name: name.into(),
                runner: Runner::Pgbench { url: url.clone(), script: dir.join(script) },
            });
        }
    }
    if o.runlimit {
        eprintln!("  filling runlimit's table (100,000 keys, 32 per check_all)");
        match runlimit_make(url, keys.clone()).await {
            Ok(make) => contenders.push(op_contender("PostgreSQL", "runlimit-postgres 0.3 `check`", KEY_COUNT, make)),
            Err(e) => eprintln!("  runlimit-postgres: {e:#}"),
        }
    }
    if o.node {
        match rlf(o, "PostgreSQL", "postgres", url) {
            Ok(k) => contenders.push(k),
            Err(e) => eprintln!("  rate-limiter-flexible: {e:#}"),
        }
    }
    res.rounds(o, &mut contenders, &o.callers).await;
    Ok(())
}

async fn run_mysql(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let url = &o.my;
    eprintln!("MariaDB/MySQL ({url})");
    prepare_store_table(url, T_STORE, keys).await?;
    fresh_table(url, T_RAW).await?;
    prefill(url, T_RAW, &raw_hashes(), 1).await?;
    let mut contenders = vec![
        op_contender("MariaDB", STORE, KEY_COUNT, store_for_run(url, T_STORE, keys.clone(), false)),
        op_contender("MariaDB", "raw sqlx loop, locked shape", KEY_COUNT, my_raw(url, false, false)),
        op_contender("MariaDB", "raw sqlx loop, optimistic shape", KEY_COUNT, my_raw(url, true, false)),
        op_contender("MariaDB", LEAN, KEY_COUNT, my_raw(url, true, true)),
    ];
    if o.node {
        match rlf(o, "MariaDB", "mysql", url) {
            Ok(k) => contenders.push(k),
            Err(e) => eprintln!("  rate-limiter-flexible: {e:#}"),
        }
    }
    res.rounds(o, &mut contenders, &o.callers).await;
    Ok(())
}

/// Fills `table` with live rows of `generation` until it holds `total` rows.
async fn fill_to(url: &str, table: &str, generation: i64, total: u64) -> Result<()> {
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut c).await?;
        sqlx::query(&format!(
            "INSERT INTO {table} (key_hash, generation, value, expires_at) \
             SELECT sha256(('fill' || i)::text::bytea), $1, '1', {PG_NOW} + {PREFILL_LIVE_MS} \
             FROM generate_series(1, $2::int8) AS i ON CONFLICT DO NOTHING"
        ))
        .bind(generation)
        .bind(i64::try_from(total)? - have)
        .execute(&mut c)
        .await?;
        c.execute(format!("VACUUM ANALYZE {table}").as_str()).await?;
        let _ = c.execute("CHECKPOINT").await;
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&mut c).await?;
        let want = i64::try_from(total)? - have;
        let mut from = 1_i64;
        while from <= want {
            let to = (from + 99_999).min(want);
            sqlx::query(&format!(
                "INSERT IGNORE INTO {table} (key_hash, generation, value, expires_at) \
                 SELECT UNHEX(SHA2(CONCAT('fill', seq), 256)), ?, '1', {MY_NOW} + {PREFILL_LIVE_MS} \
                 FROM seq_{from}_to_{to}"
            ))
            .bind(generation)
            .execute(&mut c)
            .await?;
            from = to + 1;
        }
        c.execute(format!("ANALYZE TABLE {table}").as_str()).await?;
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut c).await?;
        sqlx::query(&format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) \
             INSERT OR IGNORE INTO {table} (key_hash, generation, value, expires_at) \
             SELECT randomblob(32), ?, '1', {LITE_NOW} + {PREFILL_LIVE_MS} FROM s"
        ))
        .bind(i64::try_from(total)? - have)
        .bind(generation)
        .execute(&mut c)
        .await?;
    }
    Ok(())
}

const SIZE_SMALL: &str = "size: table at 10,000 rows";
const SIZE_LARGE: &str = "size: table at 1,000,000 rows";
const SIZE_RAW_SMALL: &str = "size, raw rusqlite loop: table at 10,000 rows";
const SIZE_RAW_LARGE: &str = "size, raw rusqlite loop: table at 1,000,000 rows";

/// limit-store over the same 10,000 keys on two tables: one holding just
/// those 10,000 rows, one holding 990,000 more (live, of the store's
/// generation, so the bound counts them; `max_entries` 2,000,000 so that it
/// never fills). The two alternate, round by round.
async fn run_size(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let small: Arc<Vec<String>> = Arc::new(keys[..SIZE_KEYS].to_vec());
    let lite = format!("sqlite://{}?mode=rwc", o.dir.join("bench.sqlite").display());
    let any = ["sqlite", "postgres", "mysql"].iter().any(|d| o.wants(d));
    let dbs: [(&'static str, &str, String, usize); 3] = [
        ("SQLite", "sqlite", lite, 1),
        ("PostgreSQL", "postgres", o.pg.clone(), 8),
        ("MariaDB", "mysql", o.my.clone(), 8),
    ];
    for (db, flag, url, callers) in dbs {
        if any && !o.wants(flag) {
            continue;
        }
        eprintln!("Size: {db}");
        prepare_store_table(&url, T_SIZE_S, &small).await?;
        let generation = prepare_store_table(&url, T_SIZE_L, &small).await?;
        fill_to(&url, T_SIZE_L, generation, SIZE_BIG).await?;
        let check = store(&url, T_SIZE_L, 1, 2 * SIZE_BIG).await?;
        eprintln!("  live entries in the large table: {}", check.live_entries().await?);
        drop(check);
        let mut contenders = vec![
            op_contender(db, SIZE_SMALL, SIZE_KEYS, store_make(&url, T_SIZE_S, small.clone())),
            op_contender(db, SIZE_LARGE, SIZE_KEYS, store_make(&url, T_SIZE_L, small.clone())),
        ];
        if flag == "sqlite" {
            // The control: SQLite's own cost of a larger table, the same
            // transaction with no store around it, on tables of both sizes.
            let hashes: Arc<Vec<[u8; 32]>> = Arc::new(raw_hashes()[..SIZE_KEYS].to_vec());
            for table in [T_SIZE_RAW_S, T_SIZE_RAW_L] {
                fresh_table(&url, table).await?;
                prefill(&url, table, &hashes, 1).await?;
            }
            fill_to(&url, T_SIZE_RAW_L, 1, SIZE_BIG).await?;
            let path = o.dir.join("bench.sqlite");
            for (name, table) in [(SIZE_RAW_SMALL, T_SIZE_RAW_S), (SIZE_RAW_LARGE, T_SIZE_RAW_L)] {
                let runner = Runner::Rusqlite { path: path.clone(), table, hashes: hashes.clone() };
                contenders.push(Contender { db, name: name.into(), runner });
            }
        }
        res.rounds(o, &mut contenders, &[callers]).await;
        for table in [T_SIZE_L, T_SIZE_RAW_L] {
            fresh_table(&url, table).await?; // leave the server small
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- table

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

fn print_tables(o: &Opts, res: &Results) {
    // Per round, limit-store's counts/s over this row's; the median of those.
    let ratio = |p: &Point| -> Option<f64> {
        let ours = res.0.iter().find(|q| q.db == p.db && q.contender == STORE && q.callers == p.callers)?;
        let r: Vec<f64> = ours.rounds.iter().zip(&p.rounds).map(|(a, b)| a / b).collect();
        (!r.is_empty()).then(|| median(&r))
    };
    let cell = |p: &Point, with_ratio: bool| -> String {
        let mut c = fmt_rate(median(&p.rounds));
        if with_ratio {
            if let Some(r) = ratio(p) {
                c.push_str(&format!(" (**{r:.2}**)"));
            }
        }
        if p.errors > 0 {
            c.push_str(&format!(", {} error{}", p.errors, if p.errors == 1 { "" } else { "s" }));
        }
        c
    };
    let find =
        |db: &str, name: &str, c: usize| res.0.iter().find(|p| p.db == db && p.contender == name && p.callers == c);
    let mut rows: Vec<(&str, &str)> = Vec::new();
    for p in res.0.iter().filter(|p| !p.contender.starts_with("size")) {
        if !rows.contains(&(p.db, p.contender.as_str())) {
            rows.push((p.db, p.contender.as_str()));
        }
    }
    println!();
    println!(
        "Counts per second: median of {} rounds, {} s per point after {} s of warm-up, keys uniform over 100,000.",
        o.rounds, o.secs, o.warmup
    );
    println!("In brackets: limit-store's counts/s over this row's, per round, median (above 1: limit-store is ahead).");
    println!();
    let head: Vec<String> = o.callers.iter().map(|c| format!("{c} caller{}", if *c == 1 { "" } else { "s" })).collect();
    println!("| database | contender | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (db, name) in &rows {
        let cells: Vec<String> =
            o.callers.iter().map(|&c| find(db, name, c).map_or("-".into(), |p| cell(p, *name != STORE))).collect();
        println!("| {db} | {name} | {} |", cells.join(" | "));
    }
    println!();
    println!("Range over the rounds (lowest-highest counts/s):");
    println!();
    println!("| database | contender | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (db, name) in &rows {
        let cells: Vec<String> = o
            .callers
            .iter()
            .map(|&c| {
                find(db, name, c).map_or("-".into(), |p| {
                    let lo = p.rounds.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = p.rounds.iter().copied().fold(0.0, f64::max);
                    format!("{}-{}", fmt_rate(lo), fmt_rate(hi))
                })
            })
            .collect();
        println!("| {db} | {name} | {} |", cells.join(" | "));
    }
    let size: Vec<&Point> = res.0.iter().filter(|p| p.contender.starts_with("size")).collect();
    if !size.is_empty() {
        println!();
        println!(
            "Size: limit-store over the same 10,000 keys, the table at 10,000 rows or at 1,000,000 (alternating)."
        );
        println!();
        println!(
            "| database | contender | callers | table at 10,000 rows | table at 1,000,000 rows | 1M ÷ 10k (per round, median; range) |"
        );
        println!("|---|---|---:|---:|---:|---:|");
        let pairs = [("limit-store", SIZE_SMALL, SIZE_LARGE), ("raw rusqlite loop", SIZE_RAW_SMALL, SIZE_RAW_LARGE)];
        for db in ["SQLite", "PostgreSQL", "MariaDB"] {
            for (who, small, large) in pairs {
                let small = size.iter().find(|p| p.db == db && p.contender == small);
                let large = size.iter().find(|p| p.db == db && p.contender == large);
                if let (Some(s), Some(l)) = (small, large) {
                    let r: Vec<f64> = l.rounds.iter().zip(&s.rounds).map(|(a, b)| a / b).collect();
                    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = r.iter().copied().fold(0.0, f64::max);
                    println!(
                        "| {db} | {who} | {} | {} | {} | {:.2} ({lo:.2}-{hi:.2}) |",
                        s.callers,
                        cell(s, false),
                        cell(l, false),
                        median(&r)
                    );
                }
            }
        }
    }
}

fn main() -> Result<()> {
    let o = Opts::parse()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async {
        let keys = Arc::new(keys());
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
