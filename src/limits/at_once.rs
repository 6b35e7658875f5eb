//! A limit's attempt counted here and now, on a store that answers at once
//! (the memory store, guarded or not): no future, nothing kept across an
//! await. The usual call (one value of a limit whose one part is a GCRA)
//! on a store that offers [integer counts](crate::IntegerCounts) goes
//! further: its state is counted as one integer, with no JSON. Every path
//! counts the attempt's cost.

use std::borrow::Cow;
use std::task::Poll;

use crate::transaction::refuse_in_transaction;
use crate::{GcraCounted, GcraStep, LimitStore, Millis, StoreError};

use super::compiled_limit::{CompiledLimit, Given, PartsNeeded};
use super::decision::Decision;
use super::error::LimitError;
use super::gcra::verdict;
use super::limit::Part;
use super::overrides;
use super::store_key::{key_of, CallKeys, KeyOf};

impl CompiledLimit {
    /// The attempt counted here and now, on a store that
    /// [answers at once](LimitStore::update_now): no future, and nothing
    /// kept across an await. The usual one (one value of a limit whose one
    /// part is a GCRA) through the store's integer counts, when it offers
    /// them; any other through its `update_now`. [`AnswerNow::pending`]
    /// when the store has no such path, and nothing was counted. Written
    /// as the caller holds it (see [`AnswerNow`]).
    #[inline]
    pub(super) fn attempt_now<A: AnswerNow>(&self, given: Given<'_>, cost: u64) -> A {
        if let Some(step) = self.only_gcra {
            let step = if cost == 1 { step } else { step.with_cost(cost) };
            if let Some(answered) = self.gcra_counted(step, given) {
                return A::ready(self.gcra_decision(step, answered));
            }
        }
        match self.backend.at_once() {
            Some(store) => self.attempt_guarded_now(store, given, cost),
            None => A::pending(),
        }
    }

    /// [`attempt_now`](Self::attempt_now) refused inside a transaction, as
    /// [`Limits::attempt_at_once`](super::Limits::attempt_at_once) refuses
    /// it: a [`LimitHandle`](super::LimitHandle)'s answer here and now, on
    /// a limit it found. The count's answer is returned where the count
    /// wrote it, not moved through a `Poll` and back.
    #[inline(never)]
    pub(super) fn answer_now(&self, given: Given<'_>, cost: u64) -> Option<Result<Decision, LimitError>> {
        if let Err(e) = refuse_in_transaction() {
            return Some(Err(e.into()));
        }
        self.attempt_now(given, cost)
    }

    /// The limit's one part, to count a value given alone (an address);
    /// a limit of more parts is missing the others.
    pub(super) fn only_part(&self) -> Result<&Part, LimitError> {
        match &self.limit.parts[..] {
            [part] => Ok(part),
            // A limit has at least one part: this one has more.
            parts => Err(self.missing(&parts[parts.len().saturating_sub(1)])),
        }
    }

    /// The usual attempt (one part, one value) on a limit whose one part is
    /// a GCRA, `step` of it counted through the store's integer counter:
    /// what it counted, or the store's error. `None` for any other call,
    /// one whose value its part refuses, and one whose key names a hash of
    /// its value (see [`key_of`]): the general path answers those.
    #[inline(never)]
    fn gcra_counted(&self, step: GcraStep, given: Given<'_>) -> Option<Result<GcraCounted, StoreError>> {
        let counter = self.integer.as_deref()?;
        let normalized = self.usual_value(given)?;
        let KeyOf::Plain(rest) = key_of(&self.stems[0], &normalized) else { return None };
        Some(counter.count(rest, step))
    }

    /// [`gcra_counted`](Self::gcra_counted) through the store's integer
    /// counter that answers through a future (Redis), for an attempt of
    /// `cost`: its decision, or `None` for a call the general path answers.
    pub(super) async fn gcra_later(&self, given: Given<'_>, cost: u64) -> Option<Result<Decision, LimitError>> {
        let (step, counter) = (self.only_gcra?, self.integer_later.as_deref()?);
        let step = if cost == 1 { step } else { step.with_cost(cost) };
        let normalized = self.usual_value(given)?;
        let KeyOf::Plain(rest) = key_of(&self.stems[0], &normalized) else { return None };
        let answered = counter.count(rest, step).await;
        Some(self.gcra_decision(step, answered))
    }

    /// The value of the usual attempt (one part, one value), as its part
    /// makes values one; `None` for any other call, and for a value its
    /// part refuses (the general path answers those).
    #[inline]
    fn usual_value<'g>(&self, given: Given<'g>) -> Option<Cow<'g, str>> {
        let [part] = &self.limit.parts[..] else { return None };
        match given {
            Given::Normal(value) => Some(Cow::Borrowed(value)),
            Given::Parts([(name, value)]) if *name == part.name => self.rules.apply(part.normalize, value).ok(),
            Given::Parts(_) => None,
        }
    }

    /// [`attempt_now`](Self::attempt_now) through the store's (guarded) `update_now`.
    fn attempt_guarded_now<A: AnswerNow>(&self, store: &dyn LimitStore, given: Given<'_>, cost: u64) -> A {
        let mut keys = CallKeys::new();
        match given {
            Given::Parts(parts) => {
                if let Err(e) = self.keys(parts, PartsNeeded::All, &mut keys) {
                    return A::ready(Err(e));
                }
            }
            Given::Normal(value) => keys.push(0, &self.stems[0], value),
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
        let Some(done) = store.update_now(refs, &mut apply) else { return A::pending() };
        let decided = self.settle(done.and_then(|()| last.ok_or_else(crate::store::no_apply_run)), cost);
        A::ready(match &overridden {
            Some(algorithms) => overrides::with_budgets_of(&self.limit, decided, algorithms),
            None => decided,
        })
    }

    /// The decision of an attempt that [`gcra_counted`](Self::gcra_counted)
    /// counted by `step`, or the store's error. Each answer returned from a
    /// branch of its own: one shared with the refusal's call met it in a
    /// temporary, copied out.
    #[inline]
    fn gcra_decision(&self, step: GcraStep, answered: Result<GcraCounted, StoreError>) -> Result<Decision, LimitError> {
        match answered {
            Ok(counted) => {
                let verdict = verdict(step, counted);
                if verdict.allowed {
                    Ok(self.answer_allowed(&verdict, counted.now, step.cost()))
                } else {
                    self.refused(&verdict, None, counted.now, step.cost())
                }
            }
            Err(e) => self.failed(e),
        }
    }
}

/// What an attempt's answer here and now is written as: an `Option` for a
/// [`LimitHandle`](super::LimitHandle)'s answers, a `Poll` for an attempt's
/// future. The decision is written once, into the one the caller reads:
/// one made as the other and turned into it was copied on the way.
pub(super) trait AnswerNow {
    /// Counted, with this answer.
    fn ready(answered: Result<Decision, LimitError>) -> Self;
    /// Not counted here and now: the store answers through a future.
    fn pending() -> Self;
}

impl AnswerNow for Option<Result<Decision, LimitError>> {
    #[inline]
    fn ready(answered: Result<Decision, LimitError>) -> Self {
        Some(answered)
    }

    #[inline]
    fn pending() -> Self {
        None
    }
}

impl AnswerNow for Poll<Result<Decision, LimitError>> {
    #[inline]
    fn ready(answered: Result<Decision, LimitError>) -> Self {
        Poll::Ready(answered)
    }

    #[inline]
    fn pending() -> Self {
        Poll::Pending
    }
}
