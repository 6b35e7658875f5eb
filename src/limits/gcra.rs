//! GCRA, the generic cell rate algorithm: a token bucket kept as one time.
//!
//! `budget` attempts per `window` refill evenly, one every `window / budget`
//! ms (the interval), and up to `budget` can be spent at once. What is kept
//! is the theoretical arrival time (TAT): when the bucket would be full again.
//! An attempt at `now` is allowed when `max(tat, now) + interval - now` stays
//! within `budget` intervals; the entry expires at the TAT, since from then on
//! the bucket is full and nothing needs keeping.
//!
//! The entry's expiry is the TAT, and its value the interval it was counted
//! at, so that a budget or window changed by a reload applies to what is
//! held: the `(tat - now) / interval` attempts still held are counted again
//! on the new interval (see [`GcraStep::run`]). An entry written before the
//! interval was kept holds the TAT as its value too, and is read at the
//! current rate.

use serde_json::Value;

use crate::{Entry, GcraCounted, GcraStep, Millis, Write};

use super::outcome::{Outcome, Verdict};

/// Milliseconds between two refilled attempts (0 when the window is too short
/// for the budget; such an algorithm is refused when the limit is built).
pub fn interval(budget: u64, window: Millis) -> Millis {
    match Millis::try_from(budget) {
        Ok(budget) if budget > 0 => window / budget,
        _ => 0,
    }
}

/// One attempt on a GCRA of `budget` per `window`.
#[inline]
#[cfg(test)]
pub fn check(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis) -> Outcome {
    check_cost(entry, now, budget, window, 1)
}

/// [`check`] for an attempt that counts `cost` at once (0: a check): it moves
/// the TAT by `cost` intervals, allowed when `max(tat, now) + cost × interval`
/// stays within the bucket ahead of `now`. The rule is [`GcraStep::run`]'s,
/// as on a store's [integer counts](crate::IntegerCounts).
pub fn check_cost(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, cost: u64) -> Outcome {
    let step = GcraStep::new(budget, window, cost);
    let stored = entry.filter(|e| e.expires_at > now).and_then(|e| Some((e.value.as_i64()?, e.expires_at)));
    let (kept, counted) = step.run(stored, now);
    let verdict = verdict(step, counted);
    Outcome {
        allowed: verdict.allowed,
        remaining: verdict.remaining,
        reset_at: verdict.reset_at,
        retry_after: verdict.retry_after,
        write: kept
            .map_or(Write::Keep, |(value, expires_at)| Write::Put(Entry { value: Value::from(value), expires_at })),
    }
}

/// The answer of a limit of this one part to what `step` counted: the
/// attempts left, when it next has budget, and for a refusal how long to
/// wait. The usual cost of 1 inline; any other out of its way.
#[inline]
pub(crate) fn verdict(step: GcraStep, counted: GcraCounted) -> Verdict {
    if step.cost() != 1 {
        return verdict_cost(step, counted);
    }
    let (t, capacity) = (step.interval(), step.capacity());
    let GcraCounted { tat, now, allowed } = counted;
    let next = tat.saturating_add(t);
    if !allowed {
        // The bucket is empty: allowed again once one interval has refilled.
        let allowed_at = next.saturating_sub(capacity);
        let left = capacity.saturating_sub(tat.saturating_sub(now)) / t;
        return Verdict {
            allowed: false,
            remaining: u64::try_from(left).unwrap_or(0),
            // When it next has budget: one interval refilled, not the whole
            // bucket (an `api` client may go on at 10 a second, not wait a minute).
            reset_at: allowed_at,
            retry_after: Some(allowed_at.saturating_sub(now).max(1)),
            part: 0,
        };
    }
    let left = u64::try_from(capacity.saturating_sub(next.saturating_sub(now)) / t).unwrap_or(0);
    Verdict { allowed: true, remaining: left, reset_at: next, retry_after: None, part: 0 }
}

/// [`verdict`] of an attempt of any cost.
#[inline(never)]
fn verdict_cost(step: GcraStep, counted: GcraCounted) -> Verdict {
    let (t, capacity, cost) = (step.interval(), step.capacity(), step.cost());
    let GcraCounted { tat, now, allowed } = counted;
    // Attempts left now, and when one more than that fits.
    let left = (capacity.saturating_sub(tat.saturating_sub(now)) / t).max(0);
    let more_at = tat.saturating_add(t.saturating_mul(left.saturating_add(1))).saturating_sub(capacity);
    let refused = |retry_after| Verdict {
        allowed: false,
        remaining: u64::try_from(left).unwrap_or(0),
        reset_at: more_at,
        retry_after,
        part: 0,
    };
    let span = t.saturating_mul(Millis::try_from(cost.max(1)).unwrap_or(Millis::MAX));
    if span > capacity {
        // More than a full bucket: no wait would do.
        return refused(None);
    }
    let next = tat.saturating_add(span);
    if !allowed {
        let allowed_at = next.saturating_sub(capacity);
        return refused(Some(allowed_at.saturating_sub(now).max(1)));
    }
    if cost == 0 {
        let remaining = u64::try_from(left).unwrap_or(0);
        return Verdict { allowed: true, remaining, reset_at: tat, retry_after: None, part: 0 };
    }
    let left = u64::try_from(capacity.saturating_sub(next.saturating_sub(now)) / t).unwrap_or(0);
    Verdict { allowed: true, remaining: left, reset_at: next, retry_after: None, part: 0 }
}

#[cfg(test)]
mod reload_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_700_000_000_000;

    /// One attempt on a TAT kept at the rate of `budget` per `window`: the
    /// TAT it keeps, and its answer.
    fn step(tat: Option<Millis>, now: Millis, budget: u64, window: Millis) -> (Option<Millis>, Verdict) {
        let step = GcraStep::new(budget, window, 1);
        let (kept, counted) = step.run(tat.map(|tat| (step.interval(), tat)), now);
        (kept.map(|(_, tat)| tat), verdict(step, counted))
    }

    fn put(o: &Outcome) -> Option<crate::Entry> {
        match &o.write {
            Write::Put(e) => Some(e.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_full_bucket_allows_exactly_the_budget_at_once() {
        // 10 per second: interval 100 ms, burst 10.
        let mut current = None;
        for expected in (0..10).rev() {
            let o = check(current.as_ref(), T0, 10, 1_000);
            assert!(o.allowed);
            assert_eq!(o.remaining, expected);
            current = put(&o);
        }
        let tat = current.as_ref().unwrap().expires_at;
        assert_eq!(tat, T0 + 1_000, "full again one window later");
        let refused = check(current.as_ref(), T0, 10, 1_000);
        assert!(!refused.allowed);
        assert_eq!(refused.write, Write::Keep);
        assert_eq!(refused.retry_after, Some(100));
        assert_eq!(refused.reset_at, T0 + 100, "more budget one interval later, not when full");
        // One millisecond early: still refused; at the interval's end: one more.
        assert!(!check(current.as_ref(), T0 + 99, 10, 1_000).allowed);
        let one = check(current.as_ref(), T0 + 100, 10, 1_000);
        assert!(one.allowed);
        assert_eq!(one.remaining, 0);
    }

    #[test]
    fn any_stored_integer_at_any_time_answers_without_overflow() {
        let rate = GcraStep::new(10, 1_000, 1);
        let ends = [Millis::MIN, -1, 0, 1, 100, T0, Millis::MAX];
        for now in [Millis::MIN, -1, 0, T0, Millis::MAX] {
            for tat in [None, Some(Millis::MIN), Some(-1), Some(now), Some(Millis::MAX)] {
                let (next, verdict) = step(tat, now, 10, 1_000);
                assert!(verdict.allowed == next.is_some(), "{tat:?} at {now}");
                assert!(verdict.retry_after.is_none_or(|r| r >= 1));
            }
            for (value, expires_at) in ends.iter().flat_map(|&v| ends.map(|e| (v, e))) {
                let (kept, counted) = rate.run(Some((value, expires_at)), now);
                let verdict = verdict(rate, counted);
                assert!(!verdict.allowed || kept.is_some(), "{value} until {expires_at} at {now}");
            }
        }
    }

    #[test]
    fn a_steady_rate_at_the_interval_is_always_allowed() {
        let mut current = None;
        for i in 0..1_000 {
            let o = check(current.as_ref(), T0 + i * 100, 10, 1_000);
            assert!(o.allowed, "attempt {i}");
            assert_eq!(o.remaining, 9);
            current = put(&o);
        }
    }

    #[test]
    fn an_idle_bucket_refills_to_the_budget_not_beyond() {
        let mut current = None;
        for _ in 0..10 {
            current = put(&check(current.as_ref(), T0, 10, 1_000));
        }
        // Long after the TAT the entry is gone: a full bucket, no more.
        let mut allowed = 0;
        let later = T0 + 3_600_000;
        let mut state = current.filter(|e| e.expires_at > later);
        while let Some(e) = put(&check(state.as_ref(), later, 10, 1_000)) {
            state = Some(e);
            allowed += 1;
        }
        assert_eq!(allowed, 10);
    }

    /// What one count on both stores did.
    type Seen = (Verdict, Option<crate::Entry>);

    /// One count of `key` on `store`, by the store's integer counts or by
    /// the JSON `update`, and the entry it left.
    fn count(store: &crate::MemoryStore, typed: bool, budget: u64, window: Millis) -> Seen {
        use futures_util::FutureExt;
        let verdict = if typed {
            let counter = crate::IntegerCounts::counter(store, "api:client:").unwrap();
            let step = GcraStep::new(budget, window, 1);
            counter.count("k", step).map(|counted| verdict(step, counted))
        } else {
            let counted = crate::update_with(store, &["api:client:k"], |current, now| {
                let (write, verdict) =
                    super::super::outcome::split_one(check(current[0].as_ref(), now, budget, window));
                (vec![write], verdict)
            });
            counted.now_or_never().expect("at once")
        };
        let read = crate::LimitStore::read(store, &["api:client:k"]).now_or_never().expect("at once");
        (verdict.expect("counted"), read.expect("read").pop().flatten())
    }

    proptest::proptest! {
        /// The memory store's GCRA on the integer itself answers and writes
        /// exactly as the JSON `check` does, through refills, expiry, a
        /// key that held something else and budgets changed by a reload.
        #[test]
        fn the_integer_path_counts_as_the_json_path_does(
            window in 1i64..3_000,
            steps in proptest::collection::vec((0i64..400, 0u8..8, 1u64..12), 1..60),
        ) {
            use std::sync::Arc;
            let clock = crate::clock::ManualClock::new(T0);
            let stores = [true, false].map(|_| crate::MemoryStore::with_clock(100, Arc::new(clock.clone())));
            for (advance, other, budget) in steps {
                clock.set(crate::clock::Clock::now(&clock) + advance);
                if other == 0 {
                    // Another writer left something that is not a TAT.
                    for store in &stores {
                        use futures_util::FutureExt;
                        let other = |_: &[Option<crate::Entry>], now: Millis| {
                            let entry = crate::Entry { value: serde_json::json!({"n": 1}), expires_at: now + 50 };
                            (vec![Write::Put(entry)], ())
                        };
                        let written = crate::update_with(store, &["api:client:k"], other).now_or_never();
                        proptest::prop_assert!(matches!(written, Some(Ok(()))));
                    }
                }
                let typed = count(&stores[0], true, budget, window);
                let json = count(&stores[1], false, budget, window);
                proptest::prop_assert_eq!(typed, json);
            }
        }
    }

    #[test]
    fn a_step_of_the_tat_it_counts_from_answers_as_one_of_the_stored_tat() {
        let (budget, window) = (600, 60_000);
        for now in [0, T0, Millis::MAX] {
            let near = [now.saturating_sub(1), now, now.saturating_add(50_000)];
            for stored in [None, Some(Millis::MIN), Some(near[0]), Some(near[1]), Some(near[2]), Some(Millis::MAX)] {
                let at = stored.map_or(now, |tat| tat.max(now));
                assert_eq!(
                    step(Some(at), now, budget, window),
                    step(stored, now, budget, window),
                    "{stored:?} at {now}"
                );
            }
        }
    }

    proptest::proptest! {
        /// The answer to any cost, of 1, is the usual cost's, whatever the
        /// stored TAT and the time.
        #[test]
        fn a_cost_of_one_steps_as_step_does(
            budget in 1u64..2_000,
            window in 1i64..10_000_000,
            now in proptest::prop_oneof![proptest::strategy::Just(Millis::MIN), proptest::strategy::Just(Millis::MAX), T0 - 1_000_000..T0 + 1_000_000],
            tat in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just(Millis::MIN), proptest::strategy::Just(Millis::MAX), T0 - 1_000_000..T0 + 20_000_000]),
        ) {
            let step = GcraStep::new(budget, window, 1);
            let (_, counted) = step.run(tat.map(|tat| (step.interval(), tat)), now);
            proptest::prop_assert_eq!(verdict_cost(step, counted), verdict(step, counted));
        }
    }
}
