//! Cost in the pure algorithms (`Algorithm::check_cost`; over several parts,
//! `decide_cost`'s unit test in `src/limits/algorithm.rs`): for
//! every algorithm, an attempt of cost n allows and writes what n attempts of
//! cost 1 at the same time would (the fixed window's cooldown aside: one
//! attempt of cost n starts one cooldown); cost 0 writes nothing and answers
//! what an attempt would; a refusal writes nothing; a refused cost is allowed
//! exactly when its `retry_after` says; a cost over the budget is flagged;
//! and no value, time or cost makes one panic.

use std::time::Duration;

use limit_store::limits::{Algorithm, Outcome};
use limit_store::{Entry, Millis, Write};
use proptest::prelude::*;
use serde_json::json;

const T0: Millis = 1_700_000_000_000;

/// The entry `o` writes, over `before` when it writes nothing.
fn after(before: Option<Entry>, o: &Outcome) -> Option<Entry> {
    match &o.write {
        Write::Put(e) => Some(e.clone()),
        Write::Keep => before,
        Write::Delete => None,
    }
}

/// The entry live at `now`.
fn live(entry: &Option<Entry>, now: Millis) -> Option<Entry> {
    entry.clone().filter(|e| e.expires_at > now)
}

/// Every algorithm, small enough to run out in a few steps.
fn algorithm() -> impl Strategy<Value = Algorithm> {
    let ms = Duration::from_millis;
    prop_oneof![
        (1u64..12, 1u64..5_000).prop_map(move |(b, w)| Algorithm::fixed_window(b, ms(w))),
        (1u64..12, 1i64..5_000, 1i64..2_000).prop_map(|(budget, window, cooldown)| Algorithm::FixedWindow {
            budget,
            window,
            cooldown
        }),
        (1u64..12, 1u64..5_000).prop_map(move |(b, w)| Algorithm::sliding_window(b, ms(w))),
        (1u64..12, 1u64..5_000, 1u64..8_000).prop_map(move |(b, w, l)| Algorithm::lockout(b, ms(w), ms(l))),
        (1u64..12, 12u64..5_000).prop_map(move |(b, w)| Algorithm::gcra(b, ms(w))),
    ]
}

fn has_cooldown(a: &Algorithm) -> bool {
    matches!(a, Algorithm::FixedWindow { cooldown, .. } if *cooldown > 0)
}

/// What a later attempt would see of `entry`: the answers of every cost at
/// a few times, so two entries that count alike compare equal even when
/// their values are written differently (a sliding window's runs).
fn seen_later(a: &Algorithm, entry: &Option<Entry>, now: Millis) -> Vec<(bool, u64, Millis, Option<Millis>)> {
    let mut seen = Vec::new();
    for later in [now, now + 1, now + a.window() / 2, now + a.window() - 1, now + a.window()] {
        for cost in 0..=a.budget() + 1 {
            let o = a.check_cost(live(entry, later).as_ref(), later, cost);
            seen.push((o.allowed, o.remaining, o.reset_at, o.retry_after));
        }
    }
    seen
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Walks a history of attempts of any cost and, at each step, holds the
    /// attempt of cost n against the rules.
    #[test]
    fn a_cost_counts_as_its_attempts_would(
        a in algorithm(),
        steps in proptest::collection::vec((0i64..3_000, 0u64..14), 1..40),
    ) {
        let mut entry: Option<Entry> = None;
        let mut now = T0;
        for (advance, cost) in steps {
            now += advance;
            let held = live(&entry, now);
            let o = a.check_cost(held.as_ref(), now, cost);
            let one = a.check_cost(held.as_ref(), now, 1);
            if !o.allowed {
                prop_assert_eq!(&o.write, &Write::Keep, "a refusal writes nothing");
            }
            if cost > a.budget() {
                prop_assert!(!o.allowed && o.retry_after.is_none() && cost > a.budget(), "{o:?}");
            } else {
                prop_assert!((o.allowed || o.retry_after.is_some()) && cost <= a.budget());
            }
            if cost == 0 {
                // A check: nothing written, the answer of an attempt, what is left now.
                prop_assert_eq!(&o.write, &Write::Keep);
                prop_assert_eq!(o.allowed, one.allowed);
                prop_assert_eq!(o.remaining, if one.allowed { one.remaining + 1 } else { one.remaining });
                prop_assert_eq!(o.retry_after, one.retry_after);
            }
            if let Some(wait) = o.retry_after.filter(|_| !o.allowed) {
                // Nothing else counts meanwhile: allowed exactly after the wait.
                let at = now + wait;
                prop_assert!(a.check_cost(live(&entry, at).as_ref(), at, cost).allowed, "{o:?}");
                if wait > 1 {
                    let before = now + wait - 1;
                    prop_assert!(!a.check_cost(live(&entry, before).as_ref(), before, cost).allowed);
                }
            }
            if cost >= 1 && !has_cooldown(&a) {
                // n attempts of cost 1 at the same time.
                let mut ones = held.clone();
                let mut all = true;
                let mut last = None;
                for _ in 0..cost {
                    let step = a.check_cost(ones.as_ref(), now, 1);
                    all &= step.allowed;
                    ones = after(ones, &step);
                    last = Some(step);
                }
                prop_assert_eq!(o.allowed, all, "cost {} on {:?}", cost, held);
                if o.allowed {
                    let last = last.expect("one at least");
                    prop_assert_eq!(o.remaining, last.remaining);
                    let written = after(held.clone(), &o);
                    prop_assert_eq!(written.as_ref().map(|e| e.expires_at), ones.as_ref().map(|e| e.expires_at));
                    if matches!(a, Algorithm::SlidingWindow { .. }) {
                        prop_assert_eq!(seen_later(&a, &written, now), seen_later(&a, &ones, now));
                    } else {
                        prop_assert_eq!(written, ones);
                    }
                }
            }
            if has_cooldown(&a) && cost >= 1 && o.allowed {
                // One attempt of cost n starts one cooldown.
                prop_assert_eq!(o.remaining, one.remaining + 1 - cost);
            }
            entry = after(held, &o);
        }
    }

    /// Any stored value, any time, any cost and any budget: an answer, never
    /// a panic; and nothing written for a cost that can't be counted.
    #[test]
    fn no_value_time_or_cost_panics(
        kind in 0u8..5,
        budget in prop_oneof![Just(u64::MAX), Just(0u64), 1u64..300],
        window in prop_oneof![Just(i64::MAX), Just(1i64), 1i64..10_000_000],
        now in prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(0i64), Just(T0)],
        cost in prop_oneof![Just(u64::MAX), Just(0u64), 1u64..300],
        value in prop_oneof![
            Just(json!(u64::MAX)), Just(json!(i64::MIN)), Just(json!([i64::MAX, i64::MIN])),
            Just(json!([0, [i64::MAX, u64::MAX], [1, 0], -5])), Just(json!([T0, [0, u64::MAX], [0, u64::MAX]])),
            Just(json!([i64::MIN, 0, i64::MAX])), Just(json!({"n": 1})), Just(json!("x")),
        ],
        expires_at in prop_oneof![Just(i64::MAX), Just(i64::MIN + 1), Just(T0 + 1)],
    ) {
        let w = Duration::from_millis(window.unsigned_abs());
        let a = match kind {
            0 => Algorithm::fixed_window(budget, w),
            1 => Algorithm::FixedWindow { budget, window, cooldown: window },
            2 => Algorithm::sliding_window(budget, w),
            3 => Algorithm::lockout(budget, w, w),
            _ => Algorithm::gcra(budget, w),
        };
        let entry = Entry { value, expires_at };
        for held in [None, Some(&entry)] {
            let o = a.check_cost(held, now, cost);
            if !o.allowed || cost == 0 {
                prop_assert_eq!(&o.write, &Write::Keep);
            }
            prop_assert!(o.retry_after.is_none_or(|r| r >= 1));
        }
    }
}

#[test]
fn a_cost_over_the_budget_is_refused_for_good_on_every_algorithm() {
    let minute = Duration::from_secs(60);
    for a in [
        Algorithm::fixed_window(5, minute),
        Algorithm::FixedWindow { budget: 5, window: 60_000, cooldown: 60_000 },
        Algorithm::sliding_window(5, minute),
        Algorithm::lockout(5, minute, minute),
        Algorithm::gcra(5, minute),
    ] {
        let o = a.check_cost(None, T0, 6);
        assert!(!o.allowed && o.retry_after.is_none(), "{a:?}: {o:?}");
        assert_eq!(o.remaining, 5, "{a:?}: all of the budget is left");
        assert_eq!(o.write, Write::Keep);
        let whole = a.check_cost(None, T0, 5);
        assert!(whole.allowed && whole.remaining == 0, "{a:?}: the whole budget fits at once");
    }
}
