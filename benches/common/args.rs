//! What the side-by-side benches share when they read their command line: how
//! each point is timed, and the walk over the flags. Included with `#[path]`.

use anyhow::{bail, Context as _, Result};

/// How the points of a run are timed: `--secs`, `--warmup`, `--rounds` and
/// `--callers 1,8,32`.
pub(crate) struct Timing {
    /// How long each point is measured, in seconds.
    pub(crate) secs: f64,
    /// How long each point runs before it is measured, in seconds.
    pub(crate) warmup: f64,
    /// How many times every point runs (the tables show the median).
    pub(crate) rounds: usize,
    /// The numbers of concurrent callers, one point each.
    pub(crate) callers: Vec<usize>,
}

/// Reads the command line: the [`Timing`] flags into `timing`, `--bench`
/// (which `cargo bench` passes) passed over, and every other flag to `flag`
/// with a way to take the value after it; `flag` answers false for a flag it
/// does not know, which fails the run.
pub(crate) fn parse_args(
    timing: &mut Timing,
    mut flag: impl FnMut(&str, &mut dyn FnMut() -> Result<String>) -> Result<bool>,
) -> Result<()> {
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().context(format!("{a} needs a value"));
        match a.as_str() {
            "--secs" => timing.secs = value()?.parse()?,
            "--warmup" => timing.warmup = value()?.parse()?,
            "--rounds" => timing.rounds = value()?.parse()?,
            "--callers" => timing.callers = value()?.split(',').map(str::parse).collect::<Result<_, _>>()?,
            "--bench" => {} // cargo bench passes it
            other => {
                if !flag(other, &mut value)? {
                    bail!("unknown argument {other:?}");
                }
            }
        }
    }
    Ok(())
}
