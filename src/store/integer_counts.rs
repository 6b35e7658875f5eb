//! Integer counts: a capability a store may offer beside the contract, for
//! a count whose whole state is one integer; see [`IntegerCounts`]. The
//! count is data ([`GcraStep`]) and its rule is here, in one place, so that
//! any store runs the same one: in this process, or in a script of its own.

use std::future::Future;
use std::pin::Pin;

use crate::{Millis, StoreError};

/// A store's integer counts: a capability a store may offer beside the contract,
/// through [`LimitStore::integer_counts`](crate::LimitStore::integer_counts),
/// for a count whose whole state is one integer (a GCRA's TAT): the store
/// runs a [`GcraStep`] on the integer and holds what it gives back, with no
/// JSON built, parsed or checked, and no list of keys or writes.
///
/// [`Limits`](crate::Limits) counts through it where a store offers it, and
/// through [`update`](crate::LimitStore::update) everywhere else; both leave
/// the same entry (a bare JSON integer), so a store may offer it or not and
/// the counts read the same either way.
///
/// A store offers one of two counters, by how its counts answer: an
/// [`IntegerCounter`] here and now (a store that
/// [answers at once](crate::LimitStore::answers_at_once)), or an
/// [`AsyncIntegerCounter`] through a future (a store whose counts wait on
/// the network). Which stores offer them:
/// - the memory store, here and now: a count there is a hash and a short
///   lock, and the JSON round trip was most of what was left;
/// - Redis on one server (or Sentinel's primary), through a future: a
///   short script runs the step's rule on the integer, where a count
///   through `update` reads, checks and writes JSON by compare-and-set;
///   its round trip stays, the script's JSON and its retries go. On a
///   cluster it offers none (its counts there go by `update`);
/// - [`Guarded`](crate::Guarded) offers its inner store's, each count
///   under its own rules (a panic answered unavailable, a failure logged;
///   through a future, the deadline and the in-flight cap too);
/// - the database stores should not: a count there is a round trip and a
///   commit, beside which the JSON costs nothing, and their rows hold JSON
///   text that other versions read.
pub trait IntegerCounts: Send + Sync {
    /// A counter of the keys that begin with `prefix` (a limit part's
    /// `{limit}:{part}:`) that answers here and now, made once and kept, so
    /// that the store may do once what every key after it shares (the
    /// memory store hashes it). `None` (the default) for a store whose
    /// counts wait.
    fn counter(&self, prefix: &str) -> Option<Box<dyn IntegerCounter>> {
        let _ = prefix;
        None
    }

    /// A counter of the keys that begin with `prefix` that answers through
    /// a future, for a store whose counts wait on I/O. `None` (the default)
    /// for a store that offers none.
    fn async_counter(&self, prefix: &str) -> Option<Box<dyn AsyncIntegerCounter>> {
        let _ = prefix;
        None
    }
}

/// Counts the keys that begin with one prefix through a future: see
/// [`IntegerCounts::async_counter`].
pub trait AsyncIntegerCounter: Send + Sync {
    /// [`IntegerCounter::count`]'s count, under the same rules, answered
    /// through a future. As for [`update`](crate::LimitStore::update), the
    /// future may be dropped at any await: the count is then written whole
    /// or not at all.
    fn count<'a>(
        &'a self,
        rest: &'a str,
        step: GcraStep,
    ) -> Pin<Box<dyn Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>>;
}

/// Counts the keys that begin with one prefix: see [`IntegerCounts::counter`].
pub trait IntegerCounter: Send + Sync {
    /// Atomically, on the key that is the prefix followed by `rest`, under
    /// the rules of [`update`](crate::LimitStore::update) for one key: runs
    /// `step` ([`GcraStep::run`]) on its integer and the store's clock,
    /// holds what it gave (an expiry at or before that clock removes the
    /// key), and answers what it counted. Here and now, without waiting on
    /// I/O or a lock held across a call. A key of more than
    /// [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) is refused, as `update`
    /// refuses it; an error writes nothing.
    fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError>;
}

/// One attempt of `cost` on a GCRA, as data: the interval between two
/// refilled attempts and the bucket's capacity, both in ms. A key holds the
/// interval it was counted at as its value and its TAT (when the bucket is
/// full again) as its expiry. The limits make the steps; a store only runs
/// them ([`run`](Self::run)), so their numbers stay the crate's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraStep {
    interval: Millis,
    capacity: Millis,
    cost: u64,
}

/// What a [`GcraStep`] counted: enough to work out its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GcraCounted {
    /// The TAT the step counted from, on its interval: the one held, or the
    /// store's clock when none was held or the bucket had refilled since.
    pub tat: Millis,
    /// The store's clock when it counted.
    pub now: Millis,
    /// Whether the cost fitted: then the key holds the TAT moved on by
    /// `cost` intervals (a cost of 0, a check, moves nothing).
    pub allowed: bool,
}

impl GcraStep {
    /// An attempt of `cost` on `budget` attempts per `window` ms. A budget
    /// of 0, or a window too short for it, counts at an interval of 1 ms.
    pub(crate) fn new(budget: u64, window: Millis, cost: u64) -> Self {
        let interval = match Millis::try_from(budget) {
            Ok(budget) if budget > 0 => window / budget,
            _ => 0,
        }
        .max(1);
        let capacity = interval.saturating_mul(Millis::try_from(budget).unwrap_or(Millis::MAX));
        GcraStep { interval, capacity, cost }
    }

    /// The same step for an attempt of `cost`: the limits make a step per
    /// part once, and give it each attempt's cost.
    #[must_use]
    pub(crate) fn with_cost(self, cost: u64) -> Self {
        GcraStep { cost, ..self }
    }

    /// Milliseconds between two refilled attempts.
    pub(crate) fn interval(self) -> Millis {
        self.interval
    }

    /// The bucket's capacity: the budget's intervals, in ms.
    pub(crate) fn capacity(self) -> Millis {
        self.capacity
    }

    /// The attempt's cost, in attempts.
    pub(crate) fn cost(self) -> u64 {
        self.cost
    }

    /// The rule every store runs on a key: given its live integer and
    /// expiry (`None`: no live entry, or one that holds anything but an
    /// integer) and the store's clock, the integer to hold and its expiry
    /// (`None`: leave the key as it is), and what was counted.
    ///
    /// The attempt fits when the TAT it counts from, moved on by `cost`
    /// intervals, is at most the capacity ahead of the clock (and `cost`
    /// intervals are at most the capacity). A key counted at another
    /// interval (a reload changed the budget or the window) has the
    /// attempts it holds counted again on this one, and keeps them so even
    /// when nothing is counted.
    #[inline]
    pub fn run(self, stored: Option<(i64, Millis)>, now: Millis) -> (Option<(i64, Millis)>, GcraCounted) {
        let held = self.held(stored, now);
        let tat = held.map_or(now, |tat| tat.max(now));
        let next = if self.cost == 1 { self.next_one(tat, now) } else { self.next_cost(tat, now) };
        let written = next.filter(|_| self.cost != 0);
        (self.keep(stored, held, written), GcraCounted { tat, now, allowed: next.is_some() })
    }

    /// The TAT after one attempt from `tat`, when it fits. Saturating
    /// throughout: a stored TAT can be any integer, `now` any time.
    #[inline]
    fn next_one(self, tat: Millis, now: Millis) -> Option<Millis> {
        let next = tat.saturating_add(self.interval);
        (next.saturating_sub(now) <= self.capacity).then_some(next)
    }

    /// [`next_one`](Self::next_one) of `cost` attempts at once.
    #[inline(never)]
    fn next_cost(self, tat: Millis, now: Millis) -> Option<Millis> {
        let span = self.interval.saturating_mul(Millis::try_from(self.cost.max(1)).unwrap_or(Millis::MAX));
        if span > self.capacity {
            return None; // more than a full bucket: no wait would do
        }
        let next = tat.saturating_add(span);
        (next.saturating_sub(now) <= self.capacity).then_some(next)
    }

    /// The TAT on this step's interval of what a key holds: `stored` is its
    /// value and expiry. The expiry is the TAT; the value, the interval it
    /// was counted at. When that is another interval, the attempts held,
    /// `(tat - now) / interval`, are counted again on this one: a raised
    /// budget lets a key that spent the old one go on, a lowered one refuses
    /// it, a longer window keeps them longer. A value of the TAT itself (as
    /// kept before the interval was), or of no interval, is read as it is.
    #[inline]
    pub(crate) fn held(self, stored: Option<(i64, Millis)>, now: Millis) -> Option<Millis> {
        match stored {
            Some((interval, tat)) if interval == self.interval => Some(tat),
            Some((interval, tat)) => Some(self.rescaled(interval, tat, now)),
            None => None,
        }
    }

    /// `tat`, counted at `interval`, on this step's interval at `now`:
    /// rounded up to the millisecond, so that no part of an attempt held is
    /// lost, and at most a bucket (a lowered budget empties it; a bucket is
    /// never more than empty).
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

    /// What a key keeps after a step from `stored`, read as `held`, that
    /// moved the TAT to `next` (`None`: nothing counted): `next`, or, when
    /// nothing was counted but `held` is `stored` counted again on this
    /// interval, `held`, so that from now on it refills at this rate; else
    /// nothing. As a value (this interval) and an expiry (the TAT).
    #[inline]
    fn keep(self, stored: Option<(i64, Millis)>, held: Option<Millis>, next: Option<Millis>) -> Option<(i64, Millis)> {
        match (next, stored) {
            (Some(next), _) => Some((self.interval, next)),
            (None, Some((interval, was))) if interval != self.interval => self.rescaled_kept(held, was),
            (None, _) => None,
        }
    }

    /// [`keep`](Self::keep) of a refusal or a check on a key counted at
    /// another interval: `held` when it is not what was kept (`was`).
    #[cold]
    #[inline(never)]
    fn rescaled_kept(self, held: Option<Millis>, was: Millis) -> Option<(i64, Millis)> {
        held.filter(|&held| held != was).map(|held| (self.interval, held))
    }
}
