//! Paired rounds: every contender's slice of requests in turn, round after
//! round, in one process, and each round's added latencies taken against
//! that round's `bare` slice. This host's pace moves by 2× between runs and
//! within one (other guests share its cores), and the added latency is a
//! difference of two times several times its size: criterion's means, taken
//! seconds apart, can see different hosts. The slices of one round see the
//! same one. Each figure is the median of the rounds', with the middle 80%.
//!
//! Printed after criterion's table; `LIMIT_STORE_BENCH_PAIRED=1 cargo bench
//! --bench layer --features axum` prints it alone (about 10 s).

use std::net::SocketAddr;

use axum::Router;
use tokio::runtime::Runtime;

use super::figures::middle_80;
use super::{run, BARE, GOVERNOR, GOVERNOR_HEADERS, OURS, OURS_REFUSALS};

/// Requests in one slice: four passes over the peers, a few milliseconds.
const SLICE: u64 = 4_096;
/// Rounds of slices.
const ROUNDS: usize = 400;

/// Prints the table alone, then exits, when `LIMIT_STORE_BENCH_PAIRED` asks.
pub fn alone(runtime: &Runtime, apps: &[(&'static str, Router)], peers: &[SocketAddr]) {
    if std::env::var_os("LIMIT_STORE_BENCH_PAIRED").is_some_and(|v| v != "0") {
        print_table(runtime, apps, peers);
        std::process::exit(0);
    }
}

/// Each contender's added latency, over tower_governor's and over the same
/// work's (see the bench's doc), from rounds of `apps`, `bare` among them.
pub fn print_table(runtime: &Runtime, apps: &[(&'static str, Router)], peers: &[SocketAddr]) {
    // ns per request of each app (in `apps`' order) in each round.
    let mut took = vec![Vec::with_capacity(ROUNDS); apps.len()];
    for round in 0..ROUNDS {
        // Each app goes first in turn.
        for i in (0..apps.len()).map(|i| (i + round) % apps.len()) {
            let elapsed = run(runtime, &apps[i].1, peers, SLICE);
            took[i].push(elapsed.as_secs_f64() * 1e9 / SLICE as f64);
        }
    }
    let at = |name: &str| apps.iter().position(|(n, _)| *n == name).expect("a contender of the bench");
    let bare = &took[at(BARE)];
    let added: Vec<Vec<f64>> = took.iter().map(|t| t.iter().zip(bare).map(|(t, b)| t - b).collect()).collect();
    // Each round's `a` over its `b`.
    let over = |a: &str, b: &str| -> Vec<f64> { added[at(a)].iter().zip(&added[at(b)]).map(|(a, b)| a / b).collect() };
    println!();
    println!("Paired rounds: {SLICE} requests a slice, {ROUNDS} rounds; medians of the rounds (middle 80%).");
    println!();
    println!("| contender | ns/request | added to bare | ÷ tower_governor's added | ÷ the same work's |");
    println!("|---|---:|---:|---:|---:|");
    for (i, (name, _)) in apps.iter().enumerate() {
        let (all, same) = match *name {
            BARE => ("-".to_owned(), "-".to_owned()),
            GOVERNOR => ("1.00".to_owned(), "-".to_owned()),
            OURS => (spread(&over(name, GOVERNOR), 2), spread(&over(name, GOVERNOR_HEADERS), 2)),
            OURS_REFUSALS => (spread(&over(name, GOVERNOR), 2), spread(&over(name, GOVERNOR), 2)),
            _ => (spread(&over(name, GOVERNOR), 2), "-".to_owned()),
        };
        let added = if *name == BARE { "-".to_owned() } else { spread(&added[i], 0) };
        println!("| {name} | {} | {added} | {all} | {same} |", spread(&took[i], 0));
    }
}

/// The median of `v` and its middle 80%, with `digits` decimals.
fn spread(v: &[f64], digits: usize) -> String {
    let (median, low, high) = middle_80(v);
    format!("{median:.digits$} ({low:.digits$}-{high:.digits$})")
}
