//! The bench's markdown table of time per op, read back from criterion's
//! estimates of this run.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{CONTENDERS, GOVERNOR, GROUP_COLD_1T, GROUP_STEADY_1T, GROUP_STEADY_2T};

/// Where criterion keeps its results, chosen as criterion 0.8 chooses it:
/// `$CRITERION_HOME`, else `$CARGO_TARGET_DIR/criterion`, else cargo's target
/// directory (from `cargo metadata`) + `/criterion`, else `target/criterion`.
/// We also hand it to criterion explicitly, so the table reads what it wrote.
pub fn criterion_home() -> PathBuf {
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

pub fn print_table(home: &Path, since: SystemTime) {
    let scenarios = [
        (GROUP_STEADY_1T, "steady, 1 thread"),
        (GROUP_STEADY_2T, "steady, 2 threads"),
        (GROUP_COLD_1T, "new keys, 1 thread"),
    ];
    let mut rows = String::new();
    for (group, scenario) in scenarios {
        let governor = figures(home, group, GOVERNOR, since).map(|f| f.mean);
        for (function, label) in CONTENDERS {
            let Some(f) = figures(home, group, function, since) else {
                continue;
            };
            let ns = f.mean;
            // Throughput over governor's: the issue-15 aims are ≥ 1.0 for
            // `Limits::attempt` and ≥ 0.8 for `MemoryStore::update`.
            let ratio = governor.map_or("-".to_string(), |g| format!("{:.2}", g / ns));
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
    println!("× governor = governor's ns/op / this row's: throughput over governor's (aims: Limits::attempt ≥ 1.0, MemoryStore::update ≥ 0.8).");
    println!("2 threads: wall time per op with both threads counting; ops/s is the aggregate.");
    println!();
    println!("| scenario | contender | ns/op (mean) | 95% CI | median | ops/s | × governor |");
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
