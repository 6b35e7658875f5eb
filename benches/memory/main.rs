//! `Limits::attempt` and `MemoryStore::update` as a rate limit uses them,
//! side by side with two peers, and the bytes each live entry costs.
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
//! - `limits_attempt`: what a user calls, `limits.attempt("api", &[("client",
//!   key)])` (the `api` preset's GCRA, budget out of reach), polled once with a
//!   no-op waker like the store.
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
//! Run: `cargo bench --bench memory` (about 110 s), or
//! `cargo bench --bench memory -- --quick` / `LIMIT_STORE_BENCH_QUICK=1` for a
//! fast rough pass. After the runs it reads criterion's
//! `<criterion home>/<group>/<function>/new/estimates.json` (mean) and prints a
//! markdown table with ns/op, ops/s and each row's throughput over governor's,
//! then the bytes-per-entry table (`bytes.rs`) and the paired-slices table
//! (`paired.rs`; alone: `LIMIT_STORE_BENCH_PAIRED=1`). `bash bench/instructions.sh`
//! counts instructions per op instead (`probe.rs`), which noise can't move.

mod bytes;
mod contenders;
#[path = "../common/figures.rs"]
mod figures;
mod paired;
mod probe;
mod table;

use contenders::{guarded, memory, memory_number, Contender, Governor, LimitsAttempt, Runlimit};

use std::hint::black_box;
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use criterion::{measurement::WallTime, BenchmarkGroup, Criterion, SamplingMode};
use limit_store::Millis;

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
            cursor = next_cursor(cursor, iters - iters / 2);
            run_two_threads(contender, start, iters)
        });
    });
}

/// `ops` counts in all on two threads (half each; thread 0 from key `start`,
/// thread 1 half the keys on), timed from a shared barrier: the longer
/// thread's time. Spawning and each thread's set-up are not timed.
fn run_two_threads<C: Contender>(contender: &C, start: usize, ops: u64) -> Duration {
    let shares = [ops - ops / 2, ops / 2];
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

fn main() {
    bytes::child();
    probe::child();
    paired::alone();
    let since = SystemTime::now();
    let home = table::criterion_home();
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
    table::print_table(&home, since);
    bytes::print_table();
    paired::print_table();
}
