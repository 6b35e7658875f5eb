//! Paired slices: a contender and governor's `check_key` counted in turn, a
//! short slice each, many times over, in one process, and the ratio of each
//! pair's two times. This host's pace moves by 2× between runs and within
//! one (other guests share its cores), so two contenders timed seconds apart
//! can see different hosts; the two slices of a pair see the same one. The
//! figure is the median of the pairs' ratios, with the middle 80% of them.
//!
//! Both contenders are warmed and held for the whole measurement, so each
//! slice runs with the other's table in the caches too: a shared process, not
//! a clean one, which costs each about alike.
//!
//! Printed after the other tables; `LIMIT_STORE_BENCH_PAIRED=1 cargo bench
//! --bench memory` prints it alone (about 20 s).

use std::time::{Duration, Instant};

use super::contenders::{memory, memory_number, ApplyAlone, Contender, Governor, LimitsAttempt};
use super::figures::middle_80;
use super::{next_cursor, run_two_threads, warmed};

/// Counts in one slice: a few milliseconds at these speeds, and 20% of the keys.
const SLICE_OPS: u64 = 20_000;
/// Pairs of slices per row.
const PAIRS: usize = 150;

/// Prints the table alone, then exits, when `LIMIT_STORE_BENCH_PAIRED` asks.
pub fn alone() {
    if std::env::var_os("LIMIT_STORE_BENCH_PAIRED").is_some_and(|v| v != "0") {
        print_table();
        std::process::exit(0);
    }
}

/// Each row's ratios over governor: one thread, or two (each half the ops).
pub fn print_table() {
    let governor = warmed(Governor::new());
    println!();
    println!("Paired slices: {SLICE_OPS} counts each, {PAIRS} pairs in turn, throughput over governor's `check_key` in the same pair.");
    println!();
    println!("| contender | threads | median of the pairs | middle 80% |");
    println!("|---|---:|---:|---:|");
    let limits = warmed(LimitsAttempt::new());
    row("`Limits::attempt`", 1, &ratios(&limits, &governor, false));
    row("`Limits::attempt`", 2, &ratios(&limits, &governor, true));
    drop(limits);
    let object = warmed(memory());
    row("`MemoryStore::update`, `{\"n\": n}`", 1, &ratios(&object, &governor, false));
    drop(object);
    let number = warmed(memory_number());
    row("`MemoryStore::update`, a bare number", 1, &ratios(&number, &governor, false));
    drop(number);
    row("… `{\"n\": n}`'s `apply` alone, no store", 1, &ratios(&ApplyAlone, &governor, false));
}

/// `ours`' throughput over `theirs`' in each pair of slices on the same keys,
/// the one that goes first alternating.
fn ratios<A: Contender, B: Contender>(ours: &A, theirs: &B, two_threads: bool) -> Vec<f64> {
    let (mut our_local, mut their_local) = (ours.local(), theirs.local());
    let mut cursor = 0;
    (0..PAIRS)
        .map(|pair| {
            let start = cursor;
            cursor = next_cursor(cursor, SLICE_OPS);
            let mut ours_took = || timed(ours, &mut our_local, start, two_threads);
            let mut theirs_took = || timed(theirs, &mut their_local, start, two_threads);
            let (o, t) = if pair % 2 == 0 {
                let o = ours_took();
                (o, theirs_took())
            } else {
                let t = theirs_took();
                (ours_took(), t)
            };
            t.as_secs_f64() / o.as_secs_f64()
        })
        .collect()
}

/// One slice of `contender` from key `start`.
fn timed<C: Contender>(contender: &C, local: &mut C::Local, start: usize, two_threads: bool) -> Duration {
    if two_threads {
        return run_two_threads(contender, start, SLICE_OPS);
    }
    let began = Instant::now();
    contender.run(local, start, SLICE_OPS);
    began.elapsed()
}

/// A row of the table from the pairs' `ratios`.
fn row(label: &str, threads: usize, ratios: &[f64]) {
    let (median, low, high) = middle_80(ratios);
    println!("| {label} | {threads} | {median:.2} | {low:.2}-{high:.2} |");
}
