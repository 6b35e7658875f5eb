//! Instructions per op, counted rather than timed: with
//! `LIMIT_STORE_BENCH_PROBE=<contender>:<ops>` the bench binary builds that
//! contender, counts once on every key, then counts `ops` more in `counted`
//! and exits. `bench/instructions.sh` runs it under callgrind collecting only
//! inside `counted`. On a shared
//! machine, where wall time moves by 2× with the neighbours' load, the
//! instruction count does not move at all.

use super::contenders::{guarded, memory, memory_number, Contender, Governor, LimitsAttempt, Runlimit};
use super::{warmed, GOVERNOR, GUARDED, LIMITS, MEMORY, MEMORY_NUMBER, RUNLIMIT_HMAC, RUNLIMIT_PREHASHED};

const VAR: &str = "LIMIT_STORE_BENCH_PROBE";

/// Runs the probe and exits when the variable asks for one.
pub fn child() {
    let Ok(spec) = std::env::var(VAR) else { return };
    let Some((name, ops)) = spec.split_once(':').and_then(|(n, o)| Some((n.to_owned(), o.parse::<u64>().ok()?))) else {
        panic!("{VAR} takes <contender>:<ops>, e.g. limits_attempt:100000 (got {spec:?})");
    };
    match name.as_str() {
        MEMORY => run(memory(), ops),
        MEMORY_NUMBER => run(memory_number(), ops),
        GUARDED => run(guarded(), ops),
        LIMITS => run(LimitsAttempt::new(), ops),
        GOVERNOR => run(Governor::new(), ops),
        RUNLIMIT_HMAC => run(Runlimit::new(false), ops),
        RUNLIMIT_PREHASHED => run(Runlimit::new(true), ops),
        other => panic!("{VAR}: no contender {other:?}"),
    }
    std::process::exit(0);
}

fn run<C: Contender>(contender: C, ops: u64) {
    let contender = warmed(contender);
    let mut local = contender.local();
    counted(&contender, &mut local, ops);
}

/// The ops whose instructions are counted: `bench/instructions.sh` runs
/// callgrind collecting only inside this function, so the set-up, the
/// warm-up and each process's own start-up (a clock's calibration loop,
/// whose length varies) are left out.
#[inline(never)]
fn counted<C: Contender>(contender: &C, local: &mut C::Local, ops: u64) {
    contender.run(local, 0, ops);
}
