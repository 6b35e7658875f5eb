//! `limit-store check-config [FILE]`: whether a settings file is good, and
//! the limits it defines, for CI pipelines. Exit 0 when it is; otherwise the
//! error (its line and key) and exit 1.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use limit_store::config::Config;
use limit_store::limits::{presets, Algorithm, Limit};
use limit_store::{Limits, MemoryStore, Millis};

/// Options of `check-config`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The settings file (`./limit-store.toml` when not given).
    file: Option<PathBuf>,
}

/// Reads the file and builds its limits as `serve` would (on a memory
/// store: no store is opened), then prints them.
pub fn run(args: CheckArgs) -> anyhow::Result<()> {
    let path = args.file.unwrap_or_else(|| PathBuf::from(super::SETTINGS_FILE));
    let config = Config::load(&path)?;
    let builder = config.apply(Limits::builder()).store(Arc::new(MemoryStore::new())).single_instance(true);
    let limits = builder.build().with_context(|| format!("{}: the limits can't be built", path.display()))?;
    let names = limits.names();
    // A limit of the site's own is one whose name is no preset's.
    let own = |name: &str| presets::named(name).is_none();
    let own_count = names.iter().filter(|n| own(n)).count();
    println!("{}: good; {} limits ({own_count} of the site's own)", path.display(), names.len());
    for name in &names {
        if let Some(limit) = limits.limit(name) {
            println!("{}", describe(limit, own(name)));
        }
    }
    Ok(())
}

/// One line per limit and one per part: `uploads (own, policy deny)` then
/// `  user: fixed-window 20 per 1h, 2 overrides`.
fn describe(limit: &Limit, own: bool) -> String {
    let kind = if own { "own" } else { "preset" };
    let shadow = if limit.is_shadow() { ", shadow" } else { "" };
    let mut text = format!("{} ({kind}, policy {}{shadow})", limit.name(), limit.unavailable_policy());
    for part in limit.parts() {
        let a = part.algorithm();
        text.push_str(&format!("\n  {}: {a} {} per {}", part.name(), a.budget(), duration(a.window())));
        if let Algorithm::Lockout { lock, .. } = a {
            text.push_str(&format!(", lock {}", duration(*lock)));
        }
        if part.overrides().count() > 0 {
            text.push_str(&format!(", {} overrides", part.overrides().count()));
        }
    }
    text
}

/// `90s`, `15m`, `1h`, `1d`, or `1500ms`: the largest unit that divides it.
fn duration(ms: Millis) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}
