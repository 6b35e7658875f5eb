//! One limit ready to count ([`CompiledLimit`]): its store keys, its decisions
//! (those counted here and now on a store that answers at once are in
//! `at_once.rs`), its answers by policy when the store is unavailable, and
//! the tallies of each answer.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::{Clock, SystemClock};
use crate::error::Unavailable;
use crate::log::Throttle;
use crate::{AsyncIntegerCounter, GcraStep, IntegerCounter, Millis, StoreError};

use super::algorithm::{smallest_budget, Algorithm, Verdict};
use super::answers::Answers;
use super::backend::{Answered, Backend};
use super::decision::{Decision, PartLeft};
use super::error::LimitError;
use super::limit::{Limit, Part, Policy};
use super::normalize::{KeyRules, NotAnIp};
use super::overrides::Overrides;
use super::parts::Held;
use super::store_key::{self, CallKeys};

use crate::log::Kind;
/// One limit ready to count, with its counters and log throttles.
pub(super) struct CompiledLimit {
    pub(super) limit: Limit,
    /// How values are made one before they are counted.
    pub(super) rules: KeyRules,
    /// The parts' algorithms, shared with the `apply` of calls that may
    /// outlive their caller.
    pub(super) algorithms: Arc<[Algorithm]>,
    /// Each part's `{limit}:{part}`, the start of its keys.
    pub(super) stems: Box<[String]>,
    /// Each part's name, as decisions give it.
    names: Box<[&'static str]>,
    /// Where and how it counts: the limit store, or the earlier contract's adapter.
    pub(super) backend: Arc<dyn Backend>,
    /// The step of one attempt on a limit whose one part is a GCRA,
    /// worked out once for its integer count.
    pub(super) only_gcra: Option<GcraStep>,
    /// For a limit whose one part is a GCRA, the store's
    /// [integer counter](crate::IntegerCounts) of its keys, when the store
    /// offers one.
    pub(super) integer: Option<Box<dyn IntegerCounter>>,
    /// For such a limit on a store whose integer counts answer through a
    /// future (Redis), its counter of the limit's keys.
    pub(super) integer_later: Option<Box<dyn AsyncIntegerCounter>>,
    /// What it answered, shared with the limits a reload builds.
    pub(super) answers: Arc<Answers>,
    /// Values with budgets of their own; a limit with any counts through
    /// the store's general path (no `only_gcra`, no `integer`).
    pub(super) overrides: Option<Overrides>,
    pub(super) degraded_log: Throttle,
    pub(super) shadow_log: Throttle,
}

/// What an attempt names to count.
#[derive(Clone, Copy)]
pub(super) enum Given<'a> {
    /// `(part, value)` pairs, each value as the caller wrote it.
    Parts(&'a [(&'a str, &'a str)]),
    /// The value of the limit's only part (a limit of one part), already
    /// as its part makes values one (an address's text from
    /// [`KeyRules::with_address`]).
    Normal(&'a str),
}

/// Whether a call needs every part, or only those a reset clears.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum PartsNeeded {
    All,
    Resetting,
}

impl CompiledLimit {
    pub(super) fn new(limit: Limit, backend: Arc<dyn Backend>, rules: KeyRules, answers: Arc<Answers>) -> Self {
        let stems: Box<[String]> = limit.parts.iter().map(|p| store_key::stem(&limit.name, &p.name)).collect();
        let only_gcra = match &limit.parts[..] {
            [part] => match part.algorithm {
                Algorithm::Gcra { budget, window } => Some(GcraStep::new(budget, window, 1)),
                _ => None,
            },
            _ => None,
        };
        let counts = only_gcra.and(backend.integer_counts());
        let prefix = || store_key::prefix(&stems[0]);
        let integer = counts.and_then(|counts| counts.counter(&prefix()));
        let integer_later = match &integer {
            Some(_) => None,
            None => counts.and_then(|counts| counts.async_counter(&prefix())),
        };
        CompiledLimit {
            rules,
            algorithms: limit.parts.iter().map(|p| p.algorithm.clone()).collect(),
            names: limit.parts.iter().map(|p| super::name::interned(&p.name)).collect(),
            only_gcra,
            integer,
            integer_later,
            stems,
            limit,
            backend,
            answers,
            overrides: None,
            degraded_log: Throttle::new(),
            shadow_log: Throttle::new(),
        }
    }

    /// This limit counting `overrides`' values by their own budgets: off
    /// the integer count, which knows only the part's.
    pub(super) fn with_overrides(mut self, overrides: Option<Overrides>) -> Self {
        if overrides.is_some() {
            self.integer = None;
            self.integer_later = None;
            self.only_gcra = None;
        }
        self.overrides = overrides;
        self
    }

    /// The algorithms `keys` count by: `None` when no value of theirs has an
    /// override (the limit's own algorithms count them).
    #[inline]
    pub(super) fn algorithms_for(&self, keys: &CallKeys) -> Option<Arc<[Algorithm]>> {
        self.overrides.as_ref()?.algorithms_for(&self.stems, &self.algorithms, keys)
    }

    /// The decision of an attempt of `cost` the store answered (or
    /// failed), with what each part holds. Inlined, so that the usual
    /// decision is written where the caller wants it, not moved up through
    /// each call; a failure is settled out of line.
    #[inline]
    pub(super) fn settle(&self, answered: Result<Answered, StoreError>, cost: u64) -> Result<Decision, LimitError> {
        match answered {
            Ok((verdict, None, now)) => self.answer(verdict, now, cost),
            Ok((verdict, held, now)) => self.answer_held(verdict, held, now, cost),
            Err(e) => self.failed(e),
        }
    }

    /// [`answer`](Self::answer) of a limit of several parts, with what each holds.
    #[inline(never)]
    fn answer_held(&self, verdict: Verdict, held: Held, now: Millis, cost: u64) -> Result<Decision, LimitError> {
        if !verdict.allowed {
            return self.refused(&verdict, held, now, cost);
        }
        let mut decision = self.answer_allowed(&verdict, now, cost);
        decision.others = self.parts_left(held);
        Ok(decision)
    }

    /// Each part's name and budget beside what it holds.
    #[allow(clippy::box_collection)] // as `Decision::others`
    fn parts_left(&self, held: Held) -> Option<Box<Vec<PartLeft>>> {
        let held = held?;
        let parts = self.limit.parts.iter().zip(&*self.names).zip(held.iter());
        Some(Box::new(
            parts
                .map(|((part, &name), &(remaining, reset_at))| PartLeft {
                    part: name,
                    budget: part.algorithm.budget(),
                    remaining,
                    reset_at,
                })
                .collect(),
        ))
    }

    /// The decision of an attempt the store failed: its policy's, when the
    /// store was unavailable.
    #[cold]
    #[inline(never)]
    pub(super) fn failed(&self, error: StoreError) -> Result<Decision, LimitError> {
        if error.is_unavailable() {
            return Ok(self.degraded(&error));
        }
        Err(error.into())
    }

    /// Adds to `keys` the store key of each part the call needs, with the
    /// part's index, in the limit's order of parts.
    pub(super) fn keys(
        &self,
        given: &[(&str, &str)],
        needed: PartsNeeded,
        keys: &mut CallKeys,
    ) -> Result<(), LimitError> {
        let limit = &self.limit;
        if let Some((part, value)) = self.only_value(given) {
            // One part given for a limit of one, the usual call: no lists.
            let value = value.map_err(|_| self.bad_value(part))?;
            if needed == PartsNeeded::All || part.resets {
                keys.push(0, &self.stems[0], &value);
            }
            return Ok(());
        }
        let mut values: SmallVec<[Option<&str>; 4]> = smallvec::smallvec![None; limit.parts.len()];
        for &(part, value) in given {
            let Some(i) = limit.parts.iter().position(|p| p.name == part) else {
                return Err(LimitError::UnknownPart {
                    limit: limit.name.clone(),
                    part: part.to_owned(),
                    takes: limit.part_names(),
                });
            };
            if values[i].replace(value).is_some() {
                return Err(LimitError::DuplicatePart { limit: limit.name.clone(), part: part.to_owned() });
            }
        }
        for (i, (part, value)) in limit.parts.iter().zip(values).enumerate() {
            match value {
                Some(value) => {
                    let value = self.rules.apply(part.normalize, value).map_err(|_| self.bad_value(part))?;
                    // A reset clears only the parts that reset.
                    if needed == PartsNeeded::All || part.resets {
                        keys.push(i, &self.stems[i], &value);
                    }
                }
                None if needed == PartsNeeded::Resetting && !part.resets => {}
                None => return Err(self.missing(part)),
            }
        }
        Ok(())
    }

    /// For a limit of one part given just that part: the part, and its
    /// value normalized (or refused). `None` for any other call.
    fn only_value<'v>(&self, given: &[(&str, &'v str)]) -> Option<(&Part, Result<Cow<'v, str>, NotAnIp>)> {
        let ([(name, value)], [part]) = (given, &self.limit.parts[..]) else { return None };
        (*name == part.name).then(|| (part, self.rules.apply(part.normalize, value)))
    }

    /// A call that gave no value for `part`.
    #[cold]
    pub(super) fn missing(&self, part: &Part) -> LimitError {
        LimitError::MissingPart {
            limit: self.limit.name.clone(),
            part: part.name.clone(),
            takes: self.limit.part_names(),
        }
    }

    /// A value its part's normalization refused (only IPs can be refused).
    pub(super) fn bad_value(&self, part: &Part) -> LimitError {
        LimitError::BadValue {
            limit: self.limit.name.clone(),
            part: part.name.clone(),
            expected: "an IP address (IPv4 or IPv6)",
        }
    }

    /// The decision of the store's `verdict` on a limit of one part (or
    /// without what each part holds) for an attempt of `cost`; an allowed
    /// one inline, a refusal (tallied, maybe logged) out of line.
    #[inline]
    pub(super) fn answer(&self, verdict: Verdict, now: Millis, cost: u64) -> Result<Decision, LimitError> {
        if !verdict.allowed {
            return self.refused(&verdict, None, now, cost);
        }
        Ok(self.answer_allowed(&verdict, now, cost))
    }

    /// The decision of a `verdict` that allows an attempt of `cost`, tallied
    /// unless it is a check (cost 0), which counts nothing. Tallied before
    /// the decision is made, and the decision made only here, so that it is
    /// written once, where the caller wants it: one made before and shared
    /// with the refusal was copied on, with wider loads than the stores
    /// that wrote it, and the load stalled (profiled in 3b00b17).
    #[inline]
    pub(super) fn answer_allowed(&self, verdict: &Verdict, now: Millis, cost: u64) -> Decision {
        if cost != 0 {
            self.answers.allowed.add_one(now);
        }
        self.decision(verdict, now)
    }

    /// The decision of `verdict` as the store gave it.
    #[inline]
    fn decision(&self, verdict: &Verdict, now: Millis) -> Decision {
        let part = &self.limit.parts[verdict.part];
        Decision {
            allowed: verdict.allowed,
            remaining: verdict.remaining,
            reset_at: verdict.reset_at,
            retry_after: None,
            budget: part.algorithm.budget(),
            part: self.names[verdict.part],
            window: part.algorithm.window(),
            now,
            limited_by: None,
            degraded: None,
            shadow_refused: false,
            others: None,
        }
    }

    /// The decision of a `verdict` that refuses an attempt of `cost`, by
    /// the part it names: as a refusal (tallied unless it is a check, of
    /// cost 0), or let through by a limit in shadow mode; an error when the
    /// cost is over that part's budget, since no wait would let it through.
    #[inline(never)]
    pub(super) fn refused(
        &self,
        verdict: &Verdict,
        held: Held,
        now: Millis,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        if verdict.never_fits() {
            // A cost must fit every part: name the smallest budget, the one
            // that says how much may be counted at once.
            let smallest = smallest_budget(self.limit.parts.iter().map(|p| &p.algorithm));
            let part = &self.limit.parts[smallest.unwrap_or(verdict.part)];
            return Err(LimitError::CostOverBudget {
                limit: self.limit.name.clone(),
                part: part.name.clone(),
                cost,
                budget: part.algorithm.budget(),
            });
        }
        let part = &self.limit.parts[verdict.part];
        let mut decision = self.decision(verdict, now);
        decision.others = self.parts_left(held);
        decision.limited_by = Some(self.names[verdict.part]);
        // A check (cost 0) is answered as an attempt would be, and counted in
        // no tally: neither as a refusal nor as one shadow mode let through.
        if self.limit.shadow {
            if cost != 0 {
                self.answers.shadow_refused.fetch_add(1, Ordering::Relaxed);
            }
            if cost != 0 && self.shadow_log.ready() {
                tracing::info!(
                    kind = Kind::ShadowRefusal.as_str(),
                    limit = %self.limit.name,
                    part = %part.name,
                    would_refuse = self.answers.shadow_refused.load(Ordering::Relaxed),
                    "limit in shadow mode let through an attempt it would refuse"
                );
            }
            decision.allowed = true;
            decision.shadow_refused = true;
            return Ok(decision);
        }
        if cost != 0 {
            self.answers.limited.add_one(now);
        }
        let wait = verdict.retry_after.unwrap_or(1).max(1);
        decision.retry_after = Some(Duration::from_millis(u64::try_from(wait).unwrap_or(1)));
        Ok(decision)
    }

    fn degraded(&self, error: &StoreError) -> Decision {
        let reason = error.unavailable_reason().unwrap_or(Unavailable::StoreFailed);
        let policy = self.limit.policy;
        let total = self.answers.degraded.fetch_add(1, Ordering::Relaxed) + 1;
        if self.degraded_log.ready() {
            tracing::warn!(
                kind = Kind::Degraded.as_str(),
                limit = %self.limit.name,
                reason = reason.as_str(),
                policy = policy.as_str(),
                degraded = total,
                error = %error,
                "limit store unavailable: the limit's policy answered"
            );
        }
        let refuse = policy == Policy::Deny;
        let now = SystemClock.now();
        let nothing_known = self.limit.parts.iter().zip(&*self.names).map(|(part, &name)| PartLeft {
            part: name,
            budget: part.algorithm.budget(),
            remaining: 0,
            reset_at: now,
        });
        Decision {
            allowed: !refuse || self.limit.shadow,
            remaining: 0,
            reset_at: now,
            retry_after: None,
            budget: self.limit.parts[0].algorithm.budget(),
            part: self.names[0],
            window: self.limit.parts[0].algorithm.window(),
            now,
            limited_by: None,
            degraded: Some(reason),
            shadow_refused: refuse && self.limit.shadow,
            others: (self.limit.parts.len() > 1).then(|| Box::new(nothing_known.collect())),
        }
    }
}
