//! The markdown tables the run prints.

use super::*;

pub(crate) fn print_tables(o: &Opts, res: &Results) {
    let callers = &o.timing.callers;
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
        o.timing.rounds, o.timing.secs, o.timing.warmup
    );
    println!("In brackets: limit-store's counts/s over this row's, per round, median (above 1: limit-store is ahead).");
    println!("{}", commits());
    println!();
    let head: Vec<String> = callers.iter().map(|c| format!("{c} caller{}", if *c == 1 { "" } else { "s" })).collect();
    println!("| database | contender | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (db, name) in &rows {
        let cells: Vec<String> =
            callers.iter().map(|&c| find(db, name, c).map_or("-".into(), |p| cell(p, *name != STORE))).collect();
        println!("| {db} | {name} | {} |", cells.join(" | "));
    }
    println!();
    println!("Range over the rounds (lowest-highest counts/s):");
    println!();
    println!("| database | contender | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (db, name) in &rows {
        let cells: Vec<String> = callers
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
    print_fresh(o, res);
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

/// Issue 15's aim: a store that has not seen the rows it counts (a new store
/// per point; three processes, each one) at least 1.2 times
/// rate-limiter-flexible's counts/s, in one process and in three.
fn print_fresh(o: &Opts, res: &Results) {
    let callers = &o.timing.callers;
    let find = |db: &str, name: &str, c: usize| {
        res.0.iter().find(|p| p.db == db && p.contender == name && p.callers == c && !p.rounds.is_empty())
    };
    let rows: Vec<_> =
        FRESH_PAIRS.iter().filter(|(ours, _, db)| callers.iter().any(|&c| find(db, ours, c).is_some())).collect();
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "A store that has not seen the rows it counts against rate-limiter-flexible (aim: at least 1.2): \
         limit-store's counts/s ÷ rate-limiter-flexible's = per round, median (lowest-highest); \
         three processes: C callers in all, split among them."
    );
    println!();
    let head: Vec<String> = callers.iter().map(|c| format!("{c} caller{}", if *c == 1 { "" } else { "s" })).collect();
    println!("| database | limit-store | {} |", head.join(" | "));
    println!("|---|---|{}", "---:|".repeat(head.len()));
    for (ours, theirs, db) in rows {
        let cells: Vec<String> = callers
            .iter()
            .map(|&c| match (find(db, ours, c), find(db, theirs, c)) {
                (Some(a), Some(b)) => {
                    let r: Vec<f64> = a.rounds.iter().zip(&b.rounds).map(|(x, y)| x / y).collect();
                    let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = r.iter().copied().fold(0.0, f64::max);
                    let m = median(&r);
                    let ratio = if m >= 1.2 { format!("**{m:.2}**") } else { format!("{m:.2}") };
                    let (x, y) = (fmt_rate(median(&a.rounds)), fmt_rate(median(&b.rounds)));
                    format!("{x} ÷ {y} = {ratio} ({lo:.2}-{hi:.2})")
                }
                _ => "-".into(),
            })
            .collect();
        println!("| {db} | {ours} | {} |", cells.join(" | "));
    }
}

/// Whose PostgreSQL and SQLite commits wait for the disk in this run.
fn commits() -> String {
    let rlf_async = std::env::var("LIMIT_STORE_BENCH_RLF_ASYNC").is_ok_and(|v| v == "1");
    format!(
        "Commits: limit-store's {} (LIMIT_STORE_BENCH_DURABLE=1: durable); rate-limiter-flexible's on PostgreSQL {} \
         (LIMIT_STORE_BENCH_RLF_ASYNC=1: not); the other contenders' as the server is set (durable).",
        if durable() { "wait for the disk (durable_commits(true))" } else { "do not wait for the disk (the default)" },
        if rlf_async { "do not (synchronous_commit off)" } else { "wait, as the server is set" },
    )
}
