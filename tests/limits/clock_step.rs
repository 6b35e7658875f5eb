//! A store clock that steps back one second between two counts (an NTP step),
//! under every preset through `Limits`, on the memory store with a manual
//! clock. Decisions stay monotone: a step back regains no budget, brings no
//! wait or lock to an earlier end, and nothing panics or underflows (the tests
//! run with overflow checks).

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::{Clock, ManualClock};
use limit_store::{Decision, Limits, MemoryStore, Millis};

const T0: Millis = 1_700_000_000_000;
const STEP_BACK: Millis = 1_000;
/// The clock moves forward by these between rounds, in turn: within a
/// window, past a GCRA interval, past a minute's window and a 15-minute lock.
const GAPS: [Millis; 8] = [0, 300, 1_000, 1_500, 12_000, 61_000, 0, 16 * 60_000];
const ROUNDS: usize = 80;

/// Every preset, and the parts one client sends it.
const PRESETS: [(&str, &[(&str, &str)]); 5] = [
    ("sign-in", &[("account", "ada@example.com"), ("ip", "192.0.2.7")]),
    ("password-reset", &[("account", "ada@example.com"), ("ip", "192.0.2.7")]),
    ("code-sent", &[("destination", "+15550100")]),
    ("code-verify", &[("code", "challenge-1")]),
    ("api", &[("client", "key-1")]),
];

fn limits_on(clock: &ManualClock) -> Limits {
    Limits::builder()
        .store(Arc::new(MemoryStore::with_clock(10_000, Arc::new(clock.clone()))))
        .single_instance(true)
        // A small GCRA, so that its bucket empties within the rounds.
        .budget("api", "client", 5)
        .window("api", "client", Duration::from_secs(60))
        .build()
        .expect("the presets build")
}

async fn attempt(limits: &Limits, name: &str, parts: &[(&str, &str)]) -> Decision {
    let d = limits.attempt(name, parts).await.expect("an attempt is answered");
    assert_eq!(d.degraded, None, "{name}: the memory store answers");
    d
}

/// When `d` lets the next attempt through, on the store's clock.
fn allowed_at(d: &Decision) -> Millis {
    d.now + d.retry_after.map_or(0, |w| Millis::try_from(w.as_millis()).unwrap())
}

/// Two counts, the clock a second earlier at the second: what the second
/// answers is no looser than the first.
fn assert_no_looser(name: &str, round: usize, before: &Decision, after: &Decision) {
    let at = format!("{name}, round {round}: {before:?} then, a second earlier, {after:?}");
    assert_eq!(after.now, before.now - STEP_BACK, "{at}");
    if before.allowed {
        if after.allowed {
            assert!(after.remaining < before.remaining, "a step back regained budget: {at}");
        }
    } else {
        assert!(!after.allowed, "a step back let a refused client through: {at}");
        assert!(allowed_at(after) >= allowed_at(before), "a step back brought the wait's end earlier: {at}");
    }
    assert!(after.reset_at >= after.now || after.allowed, "{at}");
}

#[tokio::test]
async fn a_step_back_between_two_counts_regains_nothing() {
    for (name, parts) in PRESETS {
        let clock = ManualClock::new(T0);
        let limits = limits_on(&clock);
        let mut refused = 0;
        for round in 0..ROUNDS {
            clock.advance(Duration::from_millis(u64::try_from(GAPS[round % GAPS.len()]).unwrap()));
            let before = attempt(&limits, name, parts).await;
            clock.set(clock.now() - STEP_BACK);
            let after = attempt(&limits, name, parts).await;
            assert_no_looser(name, round, &before, &after);
            refused += usize::from(!before.allowed);
        }
        // Both kinds of answer were stepped past.
        assert!((1..ROUNDS).contains(&refused), "{name}: {refused} of {ROUNDS} refused");
    }
}
