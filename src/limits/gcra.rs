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
//! on the new interval (see `Rate::held`). An entry written before the
//! interval was kept holds the TAT as its value too, and is read at the
//! current rate.

use serde_json::Value;

use crate::{Entry, Millis, Write};

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
pub fn check(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis) -> Outcome {
    check_cost(entry, now, budget, window, 1)
}

/// [`check`] for an attempt that counts `cost` at once (0: a check): it moves
/// the TAT by `cost` intervals, allowed when `max(tat, now) + cost × interval
/// - now` stays within the bucket.
pub fn check_cost(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, cost: u64) -> Outcome {
    let rate = Rate::new(budget, window);
    let stored = entry.filter(|e| e.expires_at > now).and_then(|e| Some((e.value.as_i64()?, e.expires_at)));
    let tat = rate.held(stored, now);
    let (next, verdict) = if cost == 1 { rate.step(tat, now) } else { rate.step_cost(tat, now, cost) };
    Outcome {
        allowed: verdict.allowed,
        remaining: verdict.remaining,
        reset_at: verdict.reset_at,
        retry_after: verdict.retry_after,
        write: rate
            .keep(stored, tat, next)
            .map_or(Write::Keep, |(value, expires_at)| Write::Put(Entry { value: Value::from(value), expires_at })),
    }
}

/// The TAT an attempt at `now` counts from: the stored one, or `now` when
/// none is stored or the bucket has refilled since. [`Rate::step`] of it
/// gives what `step` of the stored TAT gives.
#[inline(always)]
pub(crate) fn counted_from(tat: Option<Millis>, now: Millis) -> Millis {
    tat.map_or(now, |tat| tat.max(now))
}

/// A GCRA's budget and window as it counts them, worked out once: the
/// interval between two refilled attempts, and the bucket's capacity in ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    interval: Millis,
    capacity: Millis,
}

impl Rate {
    /// `budget` attempts per `window`.
    pub(crate) fn new(budget: u64, window: Millis) -> Self {
        let interval = interval(budget, window).max(1);
        Rate { interval, capacity: interval.saturating_mul(Millis::try_from(budget).unwrap_or(Millis::MAX)) }
    }

    /// The TAT on this rate of what a key holds: `stored` is its value and
    /// expiry (`None`: no live entry, or one that holds no integer). The
    /// expiry is the TAT; the value, the interval it was counted at. When
    /// that is another interval (a reload changed the budget or the window),
    /// the attempts held, `(tat - now) / interval`, are counted again on
    /// this one: a raised budget lets a key that spent the old one go on,
    /// a lowered one refuses it, a longer window keeps them longer. A value
    /// of the TAT itself, or of no interval, is read at this rate.
    #[inline(always)]
    pub(crate) fn held(self, stored: Option<(i64, Millis)>, now: Millis) -> Option<Millis> {
        match stored {
            Some((interval, tat)) if interval == self.interval => Some(tat),
            Some((interval, tat)) => Some(self.rescaled(interval, tat, now)),
            None => None,
        }
    }

    /// `tat`, counted at `interval`, on this rate at `now`: rounded up to
    /// the millisecond, so that no part of an attempt held is lost, and at
    /// most a bucket (a lowered budget empties it; a bucket is never more
    /// than empty). Out of the usual count's way.
    #[cold]
    #[inline(never)]
    fn rescaled(self, interval: Millis, tat: Millis, now: Millis) -> Millis {
        if interval <= 0 || interval == tat || tat <= now {
            return tat; // no interval (a TAT kept before the interval was), or refilled
        }
        // In i128: a span of up to 2^64 times an interval of up to 2^63 fits.
        let span = (i128::from(tat) - i128::from(now)) * i128::from(self.interval);
        let (whole, part) = (span / i128::from(interval), span % i128::from(interval));
        let span = (whole + i128::from(part != 0)).min(i128::from(self.capacity));
        Millis::try_from(i128::from(now) + span).unwrap_or(Millis::MAX)
    }

    /// What a key keeps after a step from `stored` that `held` read as the
    /// TAT `tat` on this rate and that gave `next` (`None`: nothing
    /// counted): `next`, or, when nothing was counted but `tat` is `stored`
    /// counted again on this rate, `tat`, so that from now on it refills at
    /// this rate (a refusal counts nothing, but what is held is kept on the
    /// new interval); else nothing. As a value (this interval) and an
    /// expiry (the TAT), as [`held`](Self::held) reads them.
    #[inline(always)]
    pub(crate) fn keep(
        self,
        stored: Option<(i64, Millis)>,
        tat: Option<Millis>,
        next: Option<Millis>,
    ) -> Option<(i64, Millis)> {
        match (next, stored) {
            (Some(next), _) => Some((self.interval, next)),
            (None, Some((interval, was))) if interval != self.interval => self.rescaled_kept(tat, was),
            (None, _) => None,
        }
    }

    /// [`keep`](Self::keep) of a refusal or a check on a key counted at
    /// another interval: `tat` when it is not what was kept (`was`).
    #[cold]
    #[inline(never)]
    fn rescaled_kept(self, tat: Option<Millis>, was: Millis) -> Option<(i64, Millis)> {
        tat.filter(|&tat| tat != was).map(|tat| (self.interval, tat))
    }

    /// One attempt on a TAT on this rate (`None`: no live entry, or one
    /// that holds no integer; see [`held`](Self::held)): the TAT to keep
    /// when the attempt is allowed (its entry expires then), and the answer
    /// of a limit of this one part. The memory store counts with it and no
    /// JSON.
    #[inline(always)]
    pub(crate) fn step(self, tat: Option<Millis>, now: Millis) -> (Option<Millis>, Verdict) {
        let Rate { interval: t, capacity } = self;
        let tat = counted_from(tat, now);
        let next = tat.saturating_add(t);
        // Saturating throughout: a stored TAT can be any integer, `now` any time.
        if next.saturating_sub(now) > capacity {
            // The bucket is empty: allowed again once one interval has refilled.
            let allowed_at = next.saturating_sub(capacity);
            let left = capacity.saturating_sub(tat.saturating_sub(now)) / t;
            let verdict = Verdict {
                allowed: false,
                remaining: u64::try_from(left).unwrap_or(0),
                // When it next has budget: one interval refilled, not the whole
                // bucket (an `api` client may go on at 10 a second, not wait a minute).
                reset_at: allowed_at,
                retry_after: Some(allowed_at.saturating_sub(now).max(1)),
                part: 0,
            };
            return (None, verdict);
        }
        let left = u64::try_from(capacity.saturating_sub(next.saturating_sub(now)) / t).unwrap_or(0);
        (Some(next), Verdict { allowed: true, remaining: left, reset_at: next, retry_after: None, part: 0 })
    }

    /// [`step`](Self::step) for an attempt that counts `cost` at once: the
    /// TAT to store when it is counted (`None`: nothing to write, for a
    /// refusal or a check of cost 0), and the answer. `step` stays the one
    /// count of cost 1, with no cost to carry.
    pub(crate) fn step_cost(self, tat: Option<Millis>, now: Millis, cost: u64) -> (Option<Millis>, Verdict) {
        let Rate { interval: t, capacity } = self;
        let tat = counted_from(tat, now);
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
            return (None, refused(None));
        }
        let next = tat.saturating_add(span);
        if next.saturating_sub(now) > capacity {
            let allowed_at = next.saturating_sub(capacity);
            return (None, refused(Some(allowed_at.saturating_sub(now).max(1))));
        }
        if cost == 0 {
            let remaining = u64::try_from(left).unwrap_or(0);
            return (None, Verdict { allowed: true, remaining, reset_at: tat, retry_after: None, part: 0 });
        }
        let left = u64::try_from(capacity.saturating_sub(next.saturating_sub(now)) / t).unwrap_or(0);
        (Some(next), Verdict { allowed: true, remaining: left, reset_at: next, retry_after: None, part: 0 })
    }
}

#[cfg(test)]
mod reload_tests;

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Millis = 1_700_000_000_000;

    /// [`check`] on a TAT on the rate of `budget` per `window`.
    fn step(tat: Option<Millis>, now: Millis, budget: u64, window: Millis) -> (Option<Millis>, Verdict) {
        Rate::new(budget, window).step(tat, now)
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
        let rate = Rate::new(10, 1_000);
        let ends = [Millis::MIN, -1, 0, 1, 100, T0, Millis::MAX];
        for now in [Millis::MIN, -1, 0, T0, Millis::MAX] {
            for tat in [None, Some(Millis::MIN), Some(-1), Some(now), Some(Millis::MAX)] {
                let (next, verdict) = step(tat, now, 10, 1_000);
                assert!(verdict.allowed == next.is_some(), "{tat:?} at {now}");
                assert!(verdict.retry_after.is_none_or(|r| r >= 1));
            }
            for (value, expires_at) in ends.iter().flat_map(|&v| ends.map(|e| (v, e))) {
                let (next, verdict) = rate.step(rate.held(Some((value, expires_at)), now), now);
                assert!(verdict.allowed == next.is_some(), "{value} until {expires_at} at {now}");
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
            let mut verdict = None;
            let counter = crate::IntegerCounts::counter(store, "api:client:");
            let counted = counter.count("k", &mut |stored, now| {
                let rate = Rate::new(budget, window);
                let held = rate.held(stored, now);
                let (next, seen) = rate.step(held, now);
                verdict = Some(seen);
                rate.keep(stored, held, next)
            });
            counted.map(|()| verdict.expect("stepped"))
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
                let at = counted_from(stored, now);
                assert_eq!(
                    step(Some(at), now, budget, window),
                    step(stored, now, budget, window),
                    "{stored:?} at {now}"
                );
            }
        }
    }

    proptest::proptest! {
        /// `step_cost` of 1 is `step`, whatever the stored TAT and the time.
        #[test]
        fn a_cost_of_one_steps_as_step_does(
            budget in 1u64..2_000,
            window in 1i64..10_000_000,
            now in proptest::prop_oneof![proptest::strategy::Just(Millis::MIN), proptest::strategy::Just(Millis::MAX), T0 - 1_000_000..T0 + 1_000_000],
            tat in proptest::option::of(proptest::prop_oneof![proptest::strategy::Just(Millis::MIN), proptest::strategy::Just(Millis::MAX), T0 - 1_000_000..T0 + 20_000_000]),
        ) {
            let rate = Rate::new(budget, window);
            proptest::prop_assert_eq!(rate.step_cost(tat, now, 1), rate.step(tat, now));
        }
    }
}
