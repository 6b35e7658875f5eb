//! `MemoryStore::update` as a rate limit uses it, side by side with two peers.
//!
//! Every contender counts one request per op against the next key of the same
//! pre-built list of 100,000 distinct string keys, cycling, in the same run:
//!
//! - `memory_store`: `LimitStore::update` on a `limit_store::MemoryStore`, with
//!   the counter kept as JSON (`{"n": …}`) the way a fixed-window limit keeps it.
//!   `MemoryStore::update` never awaits, so its future is polled once with a
//!   no-op waker (`Waker::noop()`) and must be `Ready`: no executor cost is
//!   added. The `async_trait` box of the future is part of the API, so it is
//!   part of the figure.
//! - `memory_store_number` (1 thread only): the same with the count kept as a
//!   bare JSON number (`7`) instead of `{"n": 7}`, to show what the object costs.
//! - `memory_store_guarded`: the same through `limit_store::Guarded`, which needs
//!   a tokio runtime. Each sample runs its whole loop inside one `block_on` of a
//!   current-thread runtime, so the figure is the guard's cost plus an `.await`
//!   per op, not the cost of a `block_on` per op.
//! - `governor`: `RateLimiter::keyed` (`DashMap<String, _>`, quanta clock),
//!   `check_key(&String)`.
//! - `runlimit_hmac`: `runlimit_memory::MemoryStore::check` (fixed window, 64
//!   shards), with the string turned into its `SubjectKey` by `KeyHasher`
//!   (HMAC-SHA-256) on every op, as runlimit's contract asks.
//! - `runlimit_prehashed`: the same store with the `SubjectKey`s computed before
//!   the run: runlimit's storage cost alone.
//!
//! Budgets are huge, so nothing is ever refused (a refusal panics the bench): we
//! measure the cost of counting, not of refusing.
//!
//! Scenarios (criterion groups):
//! - `steady_1t`: all 100k keys exist (pre-warmed); one thread.
//! - `steady_2t`: the same with two threads, each doing half the ops; thread 0
//!   starts at key 0 and thread 1 at key 50,000, both cycling over all keys. The
//!   figure is wall time per op over both threads (aggregate ops/s = 1/it).
//! - `cold_1t`: every op creates its key (a fresh, empty contender every 100k
//!   ops; building and dropping it is not timed).
//!
//! Run: `cargo bench --bench memory` (about 80 s), or
//! `cargo bench --bench memory -- --quick` / `LIMIT_STORE_BENCH_QUICK=1` for a
//! fast rough pass. After the runs it reads criterion's
//! `<criterion home>/<group>/<function>/new/estimates.json` (mean) and prints a
//! markdown table with ns/op, ops/s and MemoryStore's ratio to each peer.

mod bytes;

use std::future::Future;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use criterion::{measurement::WallTime, BenchmarkGroup, Criterion, SamplingMode};
use limit_store::{Entry, LimitStore, MemoryStore, Millis, Write};

/// Distinct keys every contender counts against.
const KEY_COUNT: usize = 100_000;
/// The counter's window. Each steady contender is built and warmed right before
/// its own benchmark (warm-up plus measurement take a few seconds), so its
/// entries never expire while measured: we measure counting existing keys.
const WINDOW_MS: Millis = 60_000;
/// Room for far more than `KEY_COUNT`, so no store is ever full.
const MAX_ENTRIES: usize = 1_000_000;
const MAX_ENTRIES_U64: u64 = MAX_ENTRIES as u64;
/// runlimit defaults to one shard (one mutex); 64 is what its README shows
/// for a concurrent service.
const RUNLIMIT_SHARDS: usize = 64;

const GROUP_STEADY_1T: &str = "steady_1t";
const GROUP_STEADY_2T: &str = "steady_2t";
const GROUP_COLD_1T: &str = "cold_1t";

const MEMORY: &str = "memory_store";
const MEMORY_NUMBER: &str = "memory_store_number";
const LIMITS: &str = "limits_attempt";
const GUARDED: &str = "memory_store_guarded";
const GOVERNOR: &str = "governor";
const RUNLIMIT_HMAC: &str = "runlimit_hmac";
const RUNLIMIT_PREHASHED: &str = "runlimit_prehashed";

/// `(function id, label in the table)`, in table order. MemoryStore comes first:
/// it is what the other rows are compared with.
const CONTENDERS: &[(&str, &str)] = &[
    (MEMORY, "limit-store `MemoryStore::update` (noop waker)"),
    (MEMORY_NUMBER, "limit-store `MemoryStore::update`, count as a bare JSON number"),
    (GUARDED, "limit-store `Guarded<MemoryStore>` (tokio current_thread)"),
    (LIMITS, "limit-store `Limits::attempt(\"api\", client)` on MemoryStore (noop waker)"),
    (GOVERNOR, "governor 0.10 keyed `check_key`"),
    (RUNLIMIT_HMAC, "runlimit-memory 0.3 `check` + HMAC key"),
    (RUNLIMIT_PREHASHED, "runlimit-memory 0.3 `check`, pre-hashed key"),
];

/// `ip:10.a.b.c`: 100,000 distinct client addresses, 12 to 15 bytes each.
fn keys() -> &'static [String] {
    static KEYS: OnceLock<Vec<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..KEY_COUNT).map(|i| format!("ip:10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255)).collect()
    })
}

/// Calls `f` with `n` key indexes starting at `start`, cycling over all keys.
#[inline(always)]
fn each_index(start: usize, n: u64, mut f: impl FnMut(usize)) {
    let mut i = start;
    for _ in 0..n {
        f(i);
        i += 1;
        if i == KEY_COUNT {
            i = 0;
        }
    }
}

/// The `apply` of a fixed-window counter: add one to `n`, keep the window's end.
/// The count is kept as `{"n": …}`, the way a limit keeps its state.
fn count(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
    let expires_at = current[0].as_ref().map_or(now + WINDOW_MS, |e| e.expires_at);
    vec![Write::Put(Entry { value: serde_json::json!({ "n": n + 1 }), expires_at })]
}

/// The same counter kept as a bare JSON number: shows what the object costs.
fn count_number(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
    let expires_at = current[0].as_ref().map_or(now + WINDOW_MS, |e| e.expires_at);
    vec![Write::Put(Entry { value: serde_json::Value::from(n + 1), expires_at })]
}

type CountFn = fn(&[Option<Entry>], Millis) -> Vec<Write>;

/// One rate-limit counter implementation under test.
trait Contender: Sync {
    /// Per-thread state built outside the timed region (a runtime, for the guard).
    type Local;
    fn local(&self) -> Self::Local;
    /// Counts `n` requests on keys `start, start + 1, …` (cycling). Panics on any
    /// error or refusal.
    fn run(&self, local: &mut Self::Local, start: usize, n: u64);
}

struct Memory {
    store: MemoryStore,
    apply: CountFn,
}

impl Contender for Memory {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        // `update` never awaits for MemoryStore: poll once with a no-op waker,
        // so no executor work is added to the figure.
        let mut cx = Context::from_waker(Waker::noop());
        let mut apply = self.apply;
        each_index(start, n, |i| {
            let key = [keys[i].as_str()];
            let mut update = LimitStore::update(&self.store, &key, &mut apply);
            match update.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => panic!("MemoryStore::update failed: {e}"),
                Poll::Pending => panic!("MemoryStore::update awaited"),
            }
        });
    }
}

/// What a user calls: `limits.attempt("api", &[("client", key)])`, the `api`
/// preset (GCRA) with a budget no run reaches, on a `MemoryStore`.
struct LimitsAttempt {
    limits: limit_store::Limits,
}

impl LimitsAttempt {
    fn new() -> Self {
        let store: Arc<dyn LimitStore> = Arc::new(MemoryStore::with_max_entries(MAX_ENTRIES_U64));
        let limits = limit_store::Limits::builder()
            .store(store)
            .single_instance(true)
            // One attempt a millisecond refilled, an hour's worth at once.
            .budget("api", "client", 3_600_000)
            .window("api", "client", Duration::from_secs(3_600))
            .build()
            .expect("limits");
        Self { limits }
    }
}

impl Contender for LimitsAttempt {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        // The memory store answers at once: one poll with a no-op waker.
        let mut cx = Context::from_waker(Waker::noop());
        each_index(start, n, |i| {
            let parts = [("client", keys[i].as_str())];
            let attempt = std::pin::pin!(self.limits.attempt("api", &parts));
            match attempt.poll(&mut cx) {
                Poll::Ready(Ok(d)) if d.allowed => {}
                Poll::Ready(other) => panic!("Limits::attempt did not allow: {other:?}"),
                Poll::Pending => panic!("Limits::attempt awaited"),
            }
        });
    }
}

struct GuardedStore<G> {
    guarded: G,
}

impl<G: LimitStore> Contender for GuardedStore<G> {
    type Local = tokio::runtime::Runtime;
    fn local(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
    }
    fn run(&self, runtime: &mut tokio::runtime::Runtime, start: usize, n: u64) {
        let keys = keys();
        // One block_on per sample, not per op: the loop awaits each update.
        runtime.block_on(async {
            let mut apply = count;
            let mut i = start;
            for _ in 0..n {
                let key = [keys[i].as_str()];
                if let Err(e) = LimitStore::update(&self.guarded, &key, &mut apply).await {
                    panic!("Guarded<MemoryStore>::update failed: {e}");
                }
                i += 1;
                if i == KEY_COUNT {
                    i = 0;
                }
            }
        });
    }
}

struct Governor {
    limiter: governor::DefaultKeyedRateLimiter<String>,
}

impl Governor {
    fn new() -> Self {
        // A burst of 10^9 refilled at 1/ns: never refused at any rate reachable here.
        let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
        Self { limiter: governor::RateLimiter::keyed(quota) }
    }
}

impl Contender for Governor {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        each_index(start, n, |i| {
            if self.limiter.check_key(&keys[i]).is_err() {
                panic!("governor refused a check");
            }
        });
    }
}

struct Runlimit {
    store: runlimit_memory::MemoryStore,
    policy: runlimit_core::FixedWindowPolicy,
    hasher: runlimit_core::KeyHasher,
    /// `Some`: the subject keys, computed before the run (storage cost only).
    prehashed: Option<Vec<runlimit_core::SubjectKey>>,
}

impl Runlimit {
    fn new(prehashed: bool) -> Self {
        let config = runlimit_memory::MemoryStoreConfig::new(MAX_ENTRIES)
            .and_then(|c| c.with_shard_count(RUNLIMIT_SHARDS))
            .expect("runlimit config");
        let policy = runlimit_core::FixedWindowPolicy::new(
            runlimit_core::PolicyId::new("bench.requests").unwrap(),
            runlimit_core::ScopeId::new("client").unwrap(),
            runlimit_core::MAX_LIMIT,
            Duration::from_millis(WINDOW_MS.unsigned_abs()),
        )
        .expect("runlimit policy");
        let hasher = runlimit_core::KeyHasher::new([7u8; 32]).expect("runlimit key hasher");
        let prehashed = prehashed.then(|| keys().iter().map(|k| hasher.hash_for(&policy, k.as_bytes())).collect());
        Self { store: runlimit_memory::MemoryStore::new(config), policy, hasher, prehashed }
    }

    #[inline(always)]
    fn check(&self, subject: runlimit_core::SubjectKey) {
        let decision =
            self.store.check(&runlimit_core::Check::new(&self.policy, subject)).expect("runlimit check failed");
        if !decision.permits_request() {
            panic!("runlimit refused a check");
        }
    }
}

impl Contender for Runlimit {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        match &self.prehashed {
            Some(subjects) => each_index(start, n, |i| self.check(subjects[i])),
            None => each_index(start, n, |i| self.check(self.hasher.hash_for(&self.policy, keys[i].as_bytes()))),
        }
    }
}

/// Builds a contender and counts once on every key, so all keys exist.
fn warmed<C: Contender>(contender: C) -> C {
    let mut local = contender.local();
    contender.run(&mut local, 0, KEY_COUNT as u64);
    contender
}

fn next_cursor(cursor: usize, ops: u64) -> usize {
    (cursor + usize::try_from(ops % KEY_COUNT as u64).unwrap()) % KEY_COUNT
}

/// One thread; the key cursor carries on across samples so every sample walks
/// fresh keys rather than re-using the first few (which would stay in cache).
/// The contender is built lazily, right before its own measurement.
fn bench_one_thread<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, make: impl Fn() -> C) {
    let mut state: Option<(C, C::Local)> = None;
    let mut cursor = 0;
    group.bench_function(id, |b| {
        let (contender, local) = state.get_or_insert_with(|| {
            let c = warmed(make());
            let local = c.local();
            (c, local)
        });
        b.iter_custom(|iters| {
            let start = cursor;
            cursor = next_cursor(cursor, iters);
            let began = Instant::now();
            contender.run(local, start, iters);
            began.elapsed()
        });
    });
}

/// Two threads, `iters` ops in all (half each), timed from a shared barrier: the
/// result is the longer thread's time, i.e. wall time for `iters` ops on two
/// threads. Thread spawn and per-thread setup are outside the timed region.
fn bench_two_threads<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, make: impl Fn() -> C) {
    let mut state: Option<C> = None;
    let mut cursor = 0;
    group.bench_function(id, |b| {
        let contender = &*state.get_or_insert_with(|| warmed(make()));
        b.iter_custom(|iters| {
            let start = cursor;
            let shares = [iters - iters / 2, iters / 2];
            cursor = next_cursor(cursor, shares[0]);
            let barrier = Barrier::new(2);
            std::thread::scope(|s| {
                let workers: Vec<_> = (0..2)
                    .map(|t| {
                        let barrier = &barrier;
                        s.spawn(move || {
                            let mut local = contender.local();
                            let from = (start + t * (KEY_COUNT / 2)) % KEY_COUNT;
                            barrier.wait();
                            let began = Instant::now();
                            contender.run(&mut local, from, shares[t]);
                            began.elapsed()
                        })
                    })
                    .collect();
                workers.into_iter().map(|w| w.join().expect("bench thread panicked")).max().unwrap()
            })
        });
    });
}

/// Every op creates its key: a fresh, empty contender every `KEY_COUNT` ops.
/// Building the new one and dropping the old one are not timed.
fn bench_cold<C: Contender>(group: &mut BenchmarkGroup<'_, WallTime>, id: &str, make: impl Fn() -> C) {
    let mut state: Option<(C, C::Local)> = None;
    let mut cursor = 0;
    group.bench_function(id, |b| {
        b.iter_custom(|iters| {
            let mut remaining = iters;
            let mut timed = Duration::ZERO;
            while remaining > 0 {
                if state.is_none() || cursor == KEY_COUNT {
                    let fresh = make();
                    let local = fresh.local();
                    drop(state.replace((fresh, local)));
                    cursor = 0;
                }
                let (contender, local) = state.as_mut().unwrap();
                let chunk = remaining.min((KEY_COUNT - cursor) as u64);
                let began = Instant::now();
                contender.run(local, cursor, chunk);
                timed += began.elapsed();
                cursor += usize::try_from(chunk).unwrap();
                remaining -= chunk;
            }
            timed
        });
    });
    drop(black_box(state));
}

fn memory() -> Memory {
    Memory { store: MemoryStore::with_max_entries(MAX_ENTRIES_U64), apply: count }
}

fn memory_number() -> Memory {
    Memory { apply: count_number, ..memory() }
}

fn guarded() -> GuardedStore<impl LimitStore> {
    GuardedStore { guarded: limit_store::Guarded::new(Arc::new(MemoryStore::with_max_entries(MAX_ENTRIES_U64))) }
}

/// Where criterion keeps its results, chosen as criterion 0.8 chooses it:
/// `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else cargo's target
/// directory (from `cargo metadata`) + `/criterion`, else `target/criterion`.
/// We also hand it to criterion explicitly, so the table reads what it wrote.
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    let from_metadata = std::env::var_os("CARGO").and_then(|cargo| {
        let out =
            std::process::Command::new(cargo).args(["metadata", "--format-version", "1", "--no-deps"]).output().ok()?;
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        Some(PathBuf::from(meta["target_directory"].as_str()?).join("criterion"))
    });
    from_metadata.unwrap_or_else(|| PathBuf::from("target/criterion"))
}

/// One benchmark's figures (ns per op) from this run's estimates.json.
struct Figures {
    mean: f64,
    mean_lo: f64,
    mean_hi: f64,
    median: f64,
}

/// Reads `<home>/<group>/<function>/new/estimates.json` (criterion 0.8's
/// `Estimates`: `mean`/`median` each with `point_estimate` and
/// `confidence_interval.{lower,upper}_bound`, in ns per iteration; one
/// iteration is one op here). Files older than this run (left by an earlier run
/// or a filtered-out benchmark) are ignored.
fn figures(home: &Path, group: &str, function: &str, since: SystemTime) -> Option<Figures> {
    let path = home.join(group).join(function).join("new").join("estimates.json");
    let modified = std::fs::metadata(&path).ok()?.modified().ok()?;
    if modified < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let mean = &json["mean"];
    Some(Figures {
        mean: mean["point_estimate"].as_f64()?,
        mean_lo: mean["confidence_interval"]["lower_bound"].as_f64()?,
        mean_hi: mean["confidence_interval"]["upper_bound"].as_f64()?,
        median: json["median"]["point_estimate"].as_f64()?,
    })
}

fn ops_per_sec(ns: f64) -> String {
    let ops = 1e9 / ns;
    if ops >= 1e6 {
        format!("{:.2} M", ops / 1e6)
    } else {
        format!("{:.0} k", ops / 1e3)
    }
}

fn print_table(home: &Path, since: SystemTime) {
    let scenarios = [
        (GROUP_STEADY_1T, "steady, 1 thread"),
        (GROUP_STEADY_2T, "steady, 2 threads"),
        (GROUP_COLD_1T, "new keys, 1 thread"),
    ];
    let mut rows = String::new();
    for (group, scenario) in scenarios {
        let ours = figures(home, group, MEMORY, since).map(|f| f.mean);
        for (function, label) in CONTENDERS {
            let Some(f) = figures(home, group, function, since) else {
                continue;
            };
            let ns = f.mean;
            let ratio = match ours {
                Some(_) if *function == MEMORY => "1.00 (itself)".to_string(),
                Some(ours) => {
                    let r = ours / ns;
                    if r >= 1.0 {
                        format!("{r:.2} (MemoryStore {r:.2}x slower)")
                    } else {
                        format!("{r:.2} (MemoryStore {:.2}x faster)", 1.0 / r)
                    }
                }
                None => "-".to_string(),
            };
            rows.push_str(&format!(
                "| {scenario} | {label} | {ns:.0} | {:.0}-{:.0} | {:.0} | {} | {ratio} |\n",
                f.mean_lo,
                f.mean_hi,
                f.median,
                ops_per_sec(ns)
            ));
        }
    }
    println!();
    if rows.is_empty() {
        println!(
            "No estimates from this run under {} (test/list mode, or every benchmark filtered out).",
            home.display()
        );
        return;
    }
    println!("Time per op from {} (this run only; ratios use the mean).", home.display());
    println!("Ratio = MemoryStore ns/op / this row's ns/op (above 1: MemoryStore is slower).");
    println!("2 threads: wall time per op with both threads counting; ops/s is the aggregate.");
    println!();
    println!("| scenario | contender | ns/op (mean) | 95% CI | median | ops/s | MemoryStore ratio |");
    println!("|---|---|---:|---:|---:|---:|---|");
    print!("{rows}");

    let mut scaling = String::new();
    for (function, label) in CONTENDERS {
        let one = figures(home, GROUP_STEADY_1T, function, since);
        let two = figures(home, GROUP_STEADY_2T, function, since);
        if let (Some(one), Some(two)) = (one, two) {
            scaling.push_str(&format!("| {label} | {:.2}x |\n", one.mean / two.mean));
        }
    }
    if !scaling.is_empty() {
        println!();
        println!("| contender | 2-thread throughput / 1-thread throughput |");
        println!("|---|---:|");
        print!("{scaling}");
    }
}

fn main() {
    bytes::child();
    let since = SystemTime::now();
    let home = criterion_home();
    let quick_env = std::env::var_os("LIMIT_STORE_BENCH_QUICK").is_some_and(|v| v != "0");
    let (warm_up, measure, samples) = if quick_env {
        (Duration::from_millis(300), Duration::from_secs(1), 10)
    } else {
        (Duration::from_secs(1), Duration::from_secs(4), 30)
    };
    // Set before `configure_from_args`, so `--quick`, `--measurement-time`,
    // `--sample-size`, filters etc. on the command line still win.
    let mut c = Criterion::default()
        .output_directory(&home)
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(samples)
        .configure_from_args();

    {
        let mut g = c.benchmark_group(GROUP_STEADY_1T);
        // Same op count in every sample: the mean is a plain per-op mean.
        g.sampling_mode(SamplingMode::Flat);
        bench_one_thread(&mut g, MEMORY, memory);
        bench_one_thread(&mut g, MEMORY_NUMBER, memory_number);
        bench_one_thread(&mut g, GUARDED, guarded);
        bench_one_thread(&mut g, LIMITS, LimitsAttempt::new);
        bench_one_thread(&mut g, GOVERNOR, Governor::new);
        bench_one_thread(&mut g, RUNLIMIT_HMAC, || Runlimit::new(false));
        bench_one_thread(&mut g, RUNLIMIT_PREHASHED, || Runlimit::new(true));
        g.finish();
    }
    {
        let mut g = c.benchmark_group(GROUP_STEADY_2T);
        // Flat: threads are spawned per sample, so keep every sample long.
        g.sampling_mode(SamplingMode::Flat);
        bench_two_threads(&mut g, MEMORY, memory);
        bench_two_threads(&mut g, GUARDED, guarded);
        bench_two_threads(&mut g, LIMITS, LimitsAttempt::new);
        bench_two_threads(&mut g, GOVERNOR, Governor::new);
        bench_two_threads(&mut g, RUNLIMIT_HMAC, || Runlimit::new(false));
        bench_two_threads(&mut g, RUNLIMIT_PREHASHED, || Runlimit::new(true));
        g.finish();
    }
    {
        let mut g = c.benchmark_group(GROUP_COLD_1T);
        g.sampling_mode(SamplingMode::Flat);
        bench_cold(&mut g, MEMORY, memory);
        bench_cold(&mut g, GOVERNOR, Governor::new);
        bench_cold(&mut g, RUNLIMIT_HMAC, || Runlimit::new(false));
        g.finish();
    }

    c.final_summary();
    print_table(&home, since);
    bytes::print_table();
}
