//! A limit's attempt counted here and now, on a store that answers at once
//! (the memory store, guarded or not): no future, nothing kept across an
//! await. The usual call (one value of a limit whose one part is a GCRA)
//! on a store that offers [integer counts](crate::IntegerCounts) goes
//! further: its state is counted as one integer, with no JSON. Every path
//! counts the attempt's cost.

use std::sync::Arc;

use crate::{IntegerCounter, LimitStore, Millis, StoreError};

use super::algorithm::Verdict;
use super::counted::{Backend, Counted, Need};
use super::decision::Decision;
use super::error::LimitError;
use super::gcra::Rate;
use super::key::{key_of, CallKeys, KeyOf};

impl Counted {
    /// The attempt counted here and now, on a store that
    /// [answers at once](LimitStore::update_now): no future, and nothing
    /// kept across an await. `None` when the store has no such path.
    /// The caller tried [`gcra_counted`](Self::gcra_counted) first.
    #[inline(always)]
    pub(super) fn attempt_now(&self, parts: &[(&str, &str)], cost: u64) -> Option<Result<Decision, LimitError>> {
        self.attempt_guarded_now(self.answering_at_once()?, parts, cost)
    }

    /// The usual attempt (one part, one value) on a limit whose one part is
    /// a GCRA at `rate`, counted through the store's integer counter: the
    /// TAT the count started from and its time, of which the verdict is
    /// worked out again (the step is pure), or the store's error. `None`
    /// for any other call, one whose value its part refuses, and one whose
    /// key names a hash of its value: the general path answers those.
    #[inline(never)]
    pub(super) fn gcra_counted(
        &self,
        rate: Rate,
        given: &[(&str, &str)],
        cost: u64,
    ) -> Option<Result<(Millis, Millis), StoreError>> {
        let ([(name, value)], [part]) = (given, &self.limit.parts[..]) else { return None };
        if *name != part.name {
            return None;
        }
        let counter = self.integer.as_deref()?;
        let normalized = self.rules.apply(part.normalize, value).ok()?;
        count_gcra(counter, &self.stems[0], &normalized, rate, cost)
    }

    /// [`attempt_now`](Self::attempt_now) through the store's (guarded) `update_now`.
    fn attempt_guarded_now(
        &self,
        store: &Arc<dyn LimitStore>,
        parts: &[(&str, &str)],
        cost: u64,
    ) -> Option<Result<Decision, LimitError>> {
        let mut keys = CallKeys::new();
        if let Err(e) = self.keys(parts, Need::All, &mut keys) {
            return Some(Err(e));
        }
        // One key, the usual call: no list of them.
        let (one, many);
        let refs: &[&str] = match keys.only() {
            Some(key) => {
                one = [key];
                &one
            }
            None => {
                many = keys.refs();
                &many
            }
        };
        let mut last = None;
        let overridden = self.algorithms_for(&keys);
        let algorithms = overridden.as_deref().unwrap_or(&self.algorithms);
        let mut apply = |current: &[Option<crate::Entry>], now: Millis| {
            let (writes, verdict, held) = super::parts::decide_held(algorithms, current, now, cost);
            last = Some((verdict, held, now));
            writes
        };
        let done = store.update_now(refs, &mut apply)?;
        let decided = self.settle(done.and_then(|()| last.ok_or_else(crate::store::no_apply_run)), cost);
        Some(match &overridden {
            Some(algorithms) => self.with_budgets_of(decided, algorithms),
            None => decided,
        })
    }

    /// The decision of an attempt of `cost` that [`gcra_counted`](Self::gcra_counted)
    /// counted: its verdict and the time of the count, or the store's error.
    /// Each answer returned from a branch of its own: one shared with the
    /// refusal's call met it in a temporary, copied out.
    #[inline(always)]
    pub(super) fn gcra_decision(
        &self,
        answered: Result<(Verdict, Millis), StoreError>,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        match answered {
            Ok((verdict, at)) if verdict.allowed => Ok(self.answer_allowed(&verdict, at, cost)),
            Ok((verdict, at)) => self.refused(&verdict, None, at, cost),
            Err(e) => self.failed(e),
        }
    }

    /// The store, when it [answers at once](LimitStore::update_now).
    fn answering_at_once(&self) -> Option<&Arc<dyn LimitStore>> {
        match &self.backend {
            Backend::Store(store) if store.answers_at_once() => Some(store),
            _ => None,
        }
    }
}

/// One attempt of `cost` on a GCRA at `rate`, whose key is `value`'s on
/// the part `stem`, counted by `counter` (of the stem's keys) as one
/// integer: the TAT (on `rate`) the step counted from and its time (the step's verdict
/// is worked out again from them), or the store's error, which wrote
/// nothing. `None` when the key is too long for its text (it names a hash
/// of the value instead: see [`key_of`]).
#[inline(always)]
fn count_gcra(
    counter: &dyn IntegerCounter,
    stem: &str,
    value: &str,
    rate: Rate,
    cost: u64,
) -> Option<Result<(Millis, Millis), StoreError>> {
    let KeyOf::Plain(value) = key_of(stem, value) else { return None };
    let (mut tat, mut at) = (0, 0);
    let counted = counter.count(value, &mut |stored, now| {
        let held = rate.held(stored, now);
        tat = super::gcra::counted_from(held, now);
        at = now;
        rate.keep(stored, held, gcra_step(rate, held, now, cost).0)
    });
    Some(counted.map(|()| (tat, at)))
}

/// A GCRA's step for an attempt of `cost`: the usual cost of 1 by
/// [`Rate::step`], which carries no cost, inline; any other by `step_cost`,
/// out of the usual count's way.
#[inline(always)]
pub(super) fn gcra_step(rate: Rate, tat: Option<Millis>, now: Millis, cost: u64) -> (Option<Millis>, Verdict) {
    if cost == 1 {
        rate.step(tat, now)
    } else {
        gcra_step_cost(rate, tat, now, cost)
    }
}

#[inline(never)]
fn gcra_step_cost(rate: Rate, tat: Option<Millis>, now: Millis, cost: u64) -> (Option<Millis>, Verdict) {
    rate.step_cost(tat, now, cost)
}
