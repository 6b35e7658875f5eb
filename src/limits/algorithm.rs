//! What a limit counts with: one [`Algorithm`] per part, each a pure function
//! of the part's live entry, the store's clock and the part's budget; and
//! [`decide_cost`], which joins the parts of one attempt into one answer.
//!
//! Nothing here touches a store: the functions run inside a store's `apply`, and
//! the tests call them with explicit `now` values.

use std::time::Duration;

use smallvec::SmallVec;

use crate::{Entry, Millis, Write};

pub use super::outcome::{join, Outcome, Verdict};
pub(crate) use super::window::{MAX_SLIDING_BUDGET, MAX_WINDOW};
use super::{gcra, lockout, window};

/// How one part of a limit counts attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Algorithm {
    /// `budget` attempts per window; the window opens at the first attempt.
    /// With a `cooldown`, two allowed attempts are at least that far apart.
    FixedWindow {
        /// Attempts allowed per window.
        budget: u64,
        /// The window, in milliseconds.
        window: Millis,
        /// Least time between two allowed attempts, in milliseconds (0: none).
        cooldown: Millis,
    },
    /// `budget` attempts in any span of one window. Only allowed attempts are
    /// recorded, so a refused attempt never pushes its own window out.
    SlidingWindow {
        /// Attempts allowed in any window.
        budget: u64,
        /// The window, in milliseconds.
        window: Millis,
    },
    /// `budget` attempts per window; the attempt that uses the last of it
    /// locks the part for `lock` from then on. [`Limits::reset`](crate::Limits::reset)
    /// (a success) unlocks it.
    Lockout {
        /// Attempts allowed before the lock.
        budget: u64,
        /// The window the attempts are counted in, in milliseconds.
        window: Millis,
        /// How long the part stays locked, in milliseconds.
        lock: Millis,
    },
    /// GCRA (a token bucket kept as one timestamp): `budget` attempts per
    /// window, refilled evenly, with bursts of up to `budget`.
    Gcra {
        /// Attempts per window, and the largest burst.
        budget: u64,
        /// The window, in milliseconds.
        window: Millis,
    },
}

/// Milliseconds in `d`, saturating.
pub(crate) fn millis(d: Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

impl Algorithm {
    /// A fixed window of `budget` attempts per `window`, with no cooldown
    /// (one with a cooldown is [`Algorithm::FixedWindow`] written out).
    pub fn fixed_window(budget: u64, window: Duration) -> Self {
        Algorithm::FixedWindow { budget, window: millis(window), cooldown: 0 }
    }

    /// A sliding window of `budget` (at most 256) attempts in any `window`
    /// (at most 100 years).
    pub fn sliding_window(budget: u64, window: Duration) -> Self {
        Algorithm::SlidingWindow { budget, window: millis(window) }
    }

    /// `budget` attempts per `window`, then locked for `lock`.
    pub fn lockout(budget: u64, window: Duration, lock: Duration) -> Self {
        Algorithm::Lockout { budget, window: millis(window), lock: millis(lock) }
    }

    /// GCRA: `budget` attempts per `window`, refilled evenly.
    pub fn gcra(budget: u64, window: Duration) -> Self {
        Algorithm::Gcra { budget, window: millis(window) }
    }

    /// Attempts allowed per window.
    pub fn budget(&self) -> u64 {
        match *self {
            Algorithm::FixedWindow { budget, .. }
            | Algorithm::SlidingWindow { budget, .. }
            | Algorithm::Lockout { budget, .. }
            | Algorithm::Gcra { budget, .. } => budget,
        }
    }

    /// The window, in milliseconds.
    pub fn window(&self) -> Millis {
        match *self {
            Algorithm::FixedWindow { window, .. }
            | Algorithm::SlidingWindow { window, .. }
            | Algorithm::Lockout { window, .. }
            | Algorithm::Gcra { window, .. } => window,
        }
    }

    /// The same algorithm with another budget.
    pub(crate) fn set_budget(&mut self, to: u64) {
        match self {
            Algorithm::FixedWindow { budget, .. }
            | Algorithm::SlidingWindow { budget, .. }
            | Algorithm::Lockout { budget, .. }
            | Algorithm::Gcra { budget, .. } => *budget = to,
        }
    }

    /// The same algorithm with another window.
    pub(crate) fn set_window(&mut self, to: Millis) {
        match self {
            Algorithm::FixedWindow { window, .. }
            | Algorithm::SlidingWindow { window, .. }
            | Algorithm::Lockout { window, .. }
            | Algorithm::Gcra { window, .. } => *window = to,
        }
    }

    /// Why this algorithm can't count, if it can't.
    pub(crate) fn problem(&self) -> Option<String> {
        let (budget, window) = (self.budget(), self.window());
        if budget == 0 {
            return Some("a budget of 0 refuses everything: the budget must be at least 1".into());
        }
        if window <= 0 {
            return Some("the window must be at least 1 ms".into());
        }
        // Every time a count reckons (an expiry, a GCRA's theoretical
        // arrival, a lock's end) then stays far inside a millisecond clock's
        // range, so none of them saturates into a count that refuses nothing.
        let lock = match *self {
            Algorithm::Lockout { lock, .. } => lock,
            Algorithm::FixedWindow { cooldown, .. } => cooldown,
            _ => 0,
        };
        if window > MAX_WINDOW || lock > MAX_WINDOW {
            return Some(format!(
                "a window, a lock or a cooldown is at most 100 years ({MAX_WINDOW} ms; this one is {} ms)",
                window.max(lock)
            ));
        }
        match *self {
            Algorithm::SlidingWindow { budget, .. } if budget > MAX_SLIDING_BUDGET => Some(format!(
                "a sliding window keeps every attempt, so its budget is at most {MAX_SLIDING_BUDGET} (this one is {budget}): use a fixed window or GCRA for larger budgets"
            )),
            Algorithm::Gcra { budget, window } if gcra::interval(budget, window) == 0 => Some(format!(
                "GCRA refills one attempt every window/budget ms, and {window} ms / {budget} is under 1 ms: lower the budget or lengthen the window"
            )),
            Algorithm::FixedWindow { cooldown, .. } if cooldown < 0 => {
                Some("the cooldown can't be negative".into())
            }
            Algorithm::Lockout { lock, .. } if lock <= 0 => {
                Some("the lock must be at least 1 ms".into())
            }
            _ => None,
        }
    }

    /// Checks one attempt of `cost` on one part: what the part would answer,
    /// and what to write if the whole attempt is allowed (cost 1 for one
    /// request); allowed only when all of `cost` fits, and then counted whole. Cost 0 is a
    /// check that writes nothing: allowed when an attempt of cost 1 would
    /// be, with what is left now. A cost over the budget is refused with no
    /// `retry_after` (no wait would do: `cost` over [`budget`](Self::budget)).
    #[inline]
    pub fn check_cost(&self, entry: Option<&Entry>, now: Millis, cost: u64) -> Outcome {
        match *self {
            Algorithm::FixedWindow { budget, window, cooldown } => {
                window::fixed_cost(entry, now, budget, window, cooldown, cost)
            }
            Algorithm::SlidingWindow { budget, window } => window::sliding_cost(entry, now, budget, window, cost),
            Algorithm::Lockout { budget, window, lock } => lockout::check_cost(entry, now, budget, window, lock, cost),
            Algorithm::Gcra { budget, window } => gcra::check_cost(entry, now, budget, window, cost),
        }
    }
}

/// The index of the algorithm of the smallest budget (the first of equals):
/// the part to name when a cost is over a budget, since it must fit every part.
pub(crate) fn smallest_budget<'a>(algorithms: impl Iterator<Item = &'a Algorithm>) -> Option<usize> {
    algorithms.enumerate().min_by_key(|&(i, a)| (a.budget(), i)).map(|(i, _)| i)
}

/// Joins one attempt over all parts of a limit: allowed only when every part
/// has budget left, and then counted on every part; a refused attempt writes
/// nothing. `entries[i]` is the live entry of `parts[i]`.
#[inline]
#[cfg(test)]
pub fn decide<'a>(
    parts: impl Iterator<Item = &'a Algorithm>,
    entries: &[Option<Entry>],
    now: Millis,
) -> (Vec<Write>, Verdict) {
    decide_cost(parts, entries, now, 1)
}

/// Joins one attempt that counts `cost` on every part of a limit at once
/// (see [`Algorithm::check_cost`]): allowed only when it fits on every
/// part, and then counted on every part; a refused attempt, or cost 0,
/// writes nothing. `entries[i]` is the live entry of `parts[i]`.
pub fn decide_cost<'a>(
    parts: impl Iterator<Item = &'a Algorithm>,
    entries: &[Option<Entry>],
    now: Millis,
    cost: u64,
) -> (Vec<Write>, Verdict) {
    let mut parts = parts;
    if let ([entry], (1, Some(1))) = (entries, parts.size_hint()) {
        // One part, the most common limit: its outcome is the verdict.
        if let Some(algorithm) = parts.next() {
            return super::outcome::join_one(algorithm.check_cost(entry.as_ref(), now, cost));
        }
    }
    // Most limits have one to four parts: no list is allocated for them.
    let outcomes: SmallVec<[Outcome; 4]> =
        parts.zip(entries).map(|(algorithm, entry)| algorithm.check_cost(entry.as_ref(), now, cost)).collect();
    super::outcome::join_all(outcomes, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: Millis = 60_000;

    #[test]
    fn every_part_must_allow_and_then_every_part_counts() {
        let parts =
            [Algorithm::fixed_window(2, Duration::from_secs(60)), Algorithm::fixed_window(5, Duration::from_secs(60))];
        let mut entries = vec![None, None];
        let now = 1_000;
        for expected_remaining in [1, 0] {
            let (writes, v) = decide(parts.iter(), &entries, now);
            assert!(v.allowed);
            assert_eq!(v.remaining, expected_remaining);
            assert_eq!(v.part, 0, "the tighter part speaks");
            entries = writes
                .into_iter()
                .map(|w| match w {
                    Write::Put(e) => Some(e),
                    other => panic!("expected a put, got {other:?}"),
                })
                .collect();
        }
        // The first part is spent: refused, and the second part is not counted.
        let (writes, v) = decide(parts.iter(), &entries, now);
        assert!(!v.allowed);
        assert_eq!(v.part, 0);
        assert_eq!(v.retry_after, Some(MIN));
        assert_eq!(writes, vec![Write::Keep, Write::Keep]);
        assert_eq!(entries[1].as_ref().unwrap().value, serde_json::json!(2));
    }

    #[test]
    fn the_longest_wait_answers_a_refusal() {
        let parts =
            [Algorithm::fixed_window(1, Duration::from_secs(60)), Algorithm::fixed_window(1, Duration::from_secs(600))];
        let (writes, _) = decide(parts.iter(), &[None, None], 0);
        let entries: Vec<Option<Entry>> = writes
            .into_iter()
            .map(|w| match w {
                Write::Put(e) => Some(e),
                _ => None,
            })
            .collect();
        let (_, v) = decide(parts.iter(), &entries, 1_000);
        assert!(!v.allowed);
        assert_eq!(v.part, 1);
        assert_eq!(v.retry_after, Some(600_000 - 1_000));
    }

    #[test]
    fn problems_are_named() {
        assert!(Algorithm::fixed_window(0, Duration::from_secs(1)).problem().is_some());
        assert!(Algorithm::fixed_window(1, Duration::ZERO).problem().is_some());
        assert!(Algorithm::sliding_window(257, Duration::from_secs(1)).problem().is_some());
        assert!(Algorithm::sliding_window(256, Duration::from_secs(1)).problem().is_none());
        let century = Duration::from_millis(MAX_WINDOW.unsigned_abs());
        let longer = century + Duration::from_millis(1);
        assert!(Algorithm::sliding_window(256, century).problem().is_none());
        assert!(Algorithm::sliding_window(256, longer).problem().is_some());
        // GCRA, whose theoretical arrival once saturated into a count that
        // refused nothing; a fixed window, a lock and a cooldown alike.
        assert!(Algorithm::gcra(1, century).problem().is_none());
        assert!(Algorithm::gcra(1, longer).problem().is_some());
        assert!(Algorithm::gcra(1, Duration::from_millis(i64::MAX as u64)).problem().is_some());
        assert!(Algorithm::fixed_window(1, longer).problem().is_some());
        assert!(Algorithm::lockout(1, Duration::from_secs(60), longer).problem().is_some());
        assert!(Algorithm::lockout(1, Duration::from_secs(60), century).problem().is_none());
        assert!(Algorithm::gcra(2_000, Duration::from_secs(1)).problem().is_some());
        assert!(Algorithm::gcra(1_000, Duration::from_secs(1)).problem().is_none());
    }

    /// Every algorithm, small enough to run out in a few steps.
    fn any_algorithm() -> impl proptest::strategy::Strategy<Value = Algorithm> {
        use proptest::prelude::*;
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

    proptest::proptest! {
        /// Over all parts: a refused attempt writes nothing on any part, a
        /// check writes nothing at all, and one part's budget under the cost
        /// flags it.
        #[test]
        fn decide_cost_counts_on_every_part_or_none(
            parts in proptest::collection::vec(any_algorithm(), 1..4),
            steps in proptest::collection::vec((0i64..3_000, 0u64..14), 1..30),
        ) {
            let mut entries: Vec<Option<Entry>> = vec![None; parts.len()];
            let mut now: Millis = 1_700_000_000_000;
            for (advance, cost) in steps {
                now += advance;
                let held: Vec<Option<Entry>> =
                    entries.iter().map(|e| e.clone().filter(|e| e.expires_at > now)).collect();
                let (writes, v) = decide_cost(parts.iter(), &held, now, cost);
                proptest::prop_assert_eq!(writes.len(), parts.len());
                let each: Vec<Outcome> =
                    parts.iter().zip(&held).map(|(a, e)| a.check_cost(e.as_ref(), now, cost)).collect();
                proptest::prop_assert_eq!(v.allowed, each.iter().all(|o| o.allowed));
                proptest::prop_assert_eq!(v.never_fits(), parts.iter().any(|a| cost > a.budget()));
                if !v.allowed || cost == 0 {
                    proptest::prop_assert!(writes.iter().all(|w| *w == Write::Keep), "{writes:?}");
                }
                entries = held
                    .into_iter()
                    .zip(writes)
                    .map(|(e, w)| match w {
                        Write::Put(e) => Some(e),
                        Write::Keep => e,
                        Write::Delete => None,
                    })
                    .collect();
            }
        }
    }
}
