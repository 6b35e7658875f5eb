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
        [(RLF, 8, 1.0), (RLF, 32, 1.0), (LIMITADOR, 8, 1.0), (LIMITADOR, 32, 1.0), (INCR, 32, 0.4)]
            .into_iter()
            .filter(|(n, c, _)| names.contains(n) && callers.contains(c))
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
