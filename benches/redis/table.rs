//! The side-by-side table: medians, ranges and the aim's ratios.

use super::figures::fmt_rate;
use super::*;

/// One figure of the table: counts/s of every round.
pub(crate) struct Point {
    pub(crate) name: &'static str,
    pub(crate) callers: usize,
    pub(crate) rounds: Vec<f64>,
    pub(crate) errors: u64,
}

pub(crate) fn print_table(o: &Opts, res: &[Point], names: &[&'static str]) {
    let callers = &o.timing.callers;
    let find = |name: &str, c: usize| res.iter().find(|p| p.name == name && p.callers == c);
    println!();
    println!("Host: {} ({} cores).", cpu_model(), std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!();
    println!(
        "Counts per second: median of {} rounds (lowest-highest), {} s per point after {} s of warm-up, keys uniform over 100,000; limit-store's callers on {}.",
        o.timing.rounds,
        o.timing.secs,
        o.timing.warmup,
        if o.threads <= 1 { "one thread (a current-thread runtime)".to_owned() } else { format!("{} tokio threads", o.threads) }
    );
    println!();
    let head: Vec<String> = callers.iter().map(|c| format!("{c} caller{}", if *c == 1 { "" } else { "s" })).collect();
    println!("| contender | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(head.len()));
    for name in names {
        let cells: Vec<String> = callers
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
        [(RLF, 1, 1.0), (RLF, 8, 1.0), (RLF, 32, 1.0), (LIMITADOR, 8, 1.0), (LIMITADOR, 32, 1.0), (INCR, 32, 0.4)]
            .into_iter()
            .filter(|(n, c, _)| names.contains(n) && callers.contains(c))
            .collect();
    if !cols.is_empty() {
        versus(&ratio, &cols, names);
    }
    // The cluster's: ours over the one server's and over the peer's, at 8 and 32.
    // Then like for like: the cluster with its replicas over one server with
    // one, and a cluster without replicas over one server without one.
    let pairs: Vec<(&str, &str, f64)> = [
        (CLUSTER1, STORE, 0.8),
        (CLUSTER2, PAIR, 0.4),
        (CLUSTER2, STORE, 0.4),
        (CLUSTER1, RLF_CLUSTER, 1.0),
        (CLUSTER1, REPLICATED1, 0.8),
        (CLUSTER2, REPLICATED2, 0.4),
        (BARE1, ONE_KEY, 0.8),
        (BARE2, PAIR, 0.4),
    ]
    .into_iter()
    .filter(|(a, b, _)| names.contains(a) && names.contains(b))
    .collect();
    let many: Vec<usize> = callers.iter().copied().filter(|&c| c >= 8).collect();
    if pairs.is_empty() || many.is_empty() {
        return;
    }
    println!();
    println!("The cluster's counts/s over one server's and over the peer's on the cluster, per round: median (lowest-highest). Issue 38's aim in the second column. The rows with a replicated server or a cluster without replicas are like for like: every write applied on a replica on both sides, or on neither.");
    println!();
    let head: Vec<String> = many.iter().map(|c| format!("at {c}")).collect();
    println!("| ratio | aim | {} |", head.join(" | "));
    println!("|---|---:|{}", "---:|".repeat(many.len()));
    for (ours, theirs, aim) in pairs {
        let cells: Vec<String> = many.iter().map(|&c| ratio(ours, theirs, c)).collect();
        println!("| {ours} ÷ {theirs} | ≥ {aim:.1} | {} |", cells.join(" | "));
    }
}

/// limit-store's ratios over the peers, one column per peer and caller count.
fn versus(ratio: &dyn Fn(&str, &str, usize) -> String, cols: &[(&str, usize, f64)], names: &[&'static str]) {
    println!();
    println!(
        "limit-store's counts/s over the peer's, per round: median (lowest-highest). Issues 13's and 38's aim in the header."
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
    for ours in [STORE, GUARDED, ATTEMPT].into_iter().filter(|n| names.contains(n)) {
        let cells: Vec<String> = cols.iter().map(|(n, c, _)| ratio(ours, n, *c)).collect();
        println!("| {ours} | {} |", cells.join(" | "));
    }
}

/// The CPU's model name, as /proc/cpuinfo gives it.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into())
}
