//! A limit's attempt counted here and now, on a store that answers at once
//! (the memory store, guarded or not): no future, nothing kept across an
//! await. The usual call (one part, one value) on the memory store itself
//! goes further: its key is never written out, only hashed on from the
//! part's prehashed start, and a GCRA's state is counted as one integer.
//! Every path counts the attempt's cost (the layer's always 1).

#[cfg(feature = "axum")]
use std::net::IpAddr;
use std::sync::Arc;

use crate::store::memory::KeyStart;
use crate::{LimitStore, MemoryStore, Millis, MAX_KEY_BYTES};

use super::algorithm::Verdict;
use super::counted::{Backend, Counted, Need};
use super::decision::Decision;
use super::error::LimitError;
use super::gcra::Rate;
use super::key::CallKeys;
use super::limit::Part;
#[cfg(feature = "axum")]
use super::normalize::Ipv4Text;
#[cfg(feature = "axum")]
use super::normalize::KeyRules;

/// An attempt the layer counted at once: its [`Decision`], or, for an
/// allowed attempt whose caller needs no decision (a layer that sends no
/// fields on admitted answers), only that it was allowed, tallied as any
/// allowed attempt is. A request passed on then costs no decision made up
/// and moved back through each call.
#[cfg(feature = "axum")]
#[derive(Debug)]
pub(crate) enum AtOnce {
    /// Allowed (and tallied).
    Allowed,
    /// The attempt's answer.
    Decided(Result<Decision, LimitError>),
}

impl Counted {
    /// The attempt counted here and now, on a store that
    /// [answers at once](LimitStore::update_now): no future, and nothing
    /// kept across an await. `None` when the store has no such path.
    /// Inlined, so that the decision is written where the caller wants it.
    /// The caller tried [`gcra_in_memory`](Self::gcra_in_memory) first.
    #[inline(always)]
    pub(super) fn attempt_now(&self, parts: &[(&str, &str)], cost: u64) -> Option<Result<Decision, LimitError>> {
        // The memory store beneath answers at once: no need to ask the
        // backend. A one-part GCRA's count there was tried already: what it
        // left (a value its part refuses, another part, a failed count) the
        // guarded call answers, so that a full store is not tried twice.
        if self.only_gcra.is_none() {
            if let Some(answered) = self.attempt_in_memory(parts, cost) {
                return Some(answered);
            }
        }
        self.attempt_guarded_now(self.answering_at_once()?, parts, cost)
    }

    /// The usual attempt (one part, one value) on a limit whose one part is
    /// a GCRA at `rate`, counted on the memory store with no key text: the
    /// TAT the count started from and its time, of which the verdict is
    /// worked out again (the step is pure). `None` for any other call, one
    /// whose value its part refuses, and one that failed, which wrote
    /// nothing: the guarded call answers, refuses or logs it. `ONE`: the
    /// cost is 1, made for the usual count with no cost to carry.
    #[inline(never)]
    pub(super) fn gcra_in_memory<const ONE: bool>(
        &self,
        rate: Rate,
        given: &[(&str, &str)],
        cost: u64,
    ) -> Option<(Millis, Millis)> {
        let cost = if ONE { 1 } else { cost };
        let ([(name, value)], [part]) = (given, &self.limit.parts[..]) else { return None };
        if *name != part.name {
            return None;
        }
        let normalized = self.rules.apply(part.normalize, value).ok()?;
        let (memory, starts) = self.memory.as_ref()?;
        let [start] = &**starts else { return None };
        count_gcra(memory, start, normalized.as_bytes(), rate, cost)
    }

    /// [`attempt_now`](Self::attempt_now) past the memory store's own path:
    /// through the store's (guarded) `update_now`.
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

    /// [`attempt_now`](Self::attempt_now) of a limit of one part, given its
    /// value (the layer's count: it checked the part when it was built); an
    /// allowed attempt is [`AtOnce::Allowed`] unless `decide_allowed`.
    #[cfg(feature = "axum")]
    pub(super) fn attempt_only_now(&self, value: &str, decide_allowed: bool) -> Option<AtOnce> {
        let [only] = &self.limit.parts[..] else { return None };
        match self.count_value_in_memory(
            only,
            value,
            1,
            #[inline(always)]
            |verdict, now| self.layer_answer(verdict, now, decide_allowed),
        ) {
            Some(Ok(counted)) => return Some(counted),
            Some(Err(e)) => return Some(AtOnce::Decided(Err(e))),
            None => {}
        }
        self.attempt_guarded_now(self.answering_at_once()?, &[(&only.name, value)], 1).map(AtOnce::Decided)
    }

    /// [`attempt_only_now`](Self::attempt_only_now) given the client address
    /// `ip`: on the memory store, its text as the part normalizes it is
    /// written from the address, not parsed; elsewhere, the address's text
    /// goes the usual way (the same text: see `KeyRules::address`).
    #[cfg(feature = "axum")]
    pub(super) fn attempt_address_now(&self, ip: IpAddr, decide_allowed: bool) -> Option<AtOnce> {
        let [only] = &self.limit.parts[..] else { return None };
        if self.memory.is_some() {
            let (v4, text);
            let value = match KeyRules::ipv4_of(only.normalize, ip) {
                Some(ip) => {
                    v4 = Ipv4Text::new(ip);
                    v4.as_bytes()
                }
                None => {
                    text = self.rules.address(only.normalize, ip);
                    text.as_bytes()
                }
            };
            let counted = self.count_in_memory(
                value,
                1,
                #[inline(always)]
                |verdict, now| self.layer_answer(verdict, now, decide_allowed),
            );
            if counted.is_some() {
                return counted;
            }
        }
        let text = self.rules.address(super::normalize::Normalize::Exact, ip);
        self.attempt_guarded_now(self.answering_at_once()?, &[(&only.name, &text)], 1).map(AtOnce::Decided)
    }

    /// The layer's answer to an attempt the memory store counted: see [`AtOnce`].
    #[cfg(feature = "axum")]
    #[inline(always)]
    fn layer_answer(&self, verdict: Verdict, now: Millis, decide_allowed: bool) -> AtOnce {
        if verdict.allowed && !decide_allowed {
            self.answers.allowed.add_one(now);
            return AtOnce::Allowed;
        }
        AtOnce::Decided(self.answer(verdict, now, 1))
    }

    /// The store, when it [answers at once](LimitStore::update_now).
    fn answering_at_once(&self) -> Option<&Arc<dyn LimitStore>> {
        match &self.backend {
            Backend::Store(store) if store.answers_at_once() => Some(store),
            _ => None,
        }
    }

    /// The usual attempt on the memory store (one part, one value), counted
    /// with no key text: see [`count_in_memory`](Self::count_in_memory).
    /// `None` for any other call, and for one that failed.
    fn attempt_in_memory(&self, given: &[(&str, &str)], cost: u64) -> Option<Result<Decision, LimitError>> {
        let ([(name, value)], [part]) = (given, &self.limit.parts[..]) else { return None };
        if *name != part.name {
            return None;
        }
        let answered = self.count_value_in_memory(
            part,
            value,
            cost,
            #[inline(always)]
            |verdict, now| self.answer(verdict, now, cost),
        );
        answered.map(|decided| decided.and_then(std::convert::identity))
    }

    /// `value` of `part`, normalized (or refused), counted on the memory
    /// store: see [`count_in_memory`](Self::count_in_memory).
    fn count_value_in_memory<T>(
        &self,
        part: &Part,
        value: &str,
        cost: u64,
        then: impl FnOnce(Verdict, Millis) -> T,
    ) -> Option<Result<T, LimitError>> {
        self.memory.as_ref()?;
        match self.rules.apply(part.normalize, value) {
            Ok(normalized) => self.count_in_memory(
                normalized.as_bytes(),
                cost,
                #[inline(always)]
                |verdict, now| Ok(then(verdict, now)),
            ),
            Err(_) => Some(Err(self.bad_value(part))),
        }
    }

    /// `value` (normalized text, as bytes), `cost` of it, counted on a one-part limit's
    /// memory store with no key text: the store hashes it after the part's
    /// prehashed `{limit}:{part}:`. `None` when this limit has no such path,
    /// and for a count that failed, which wrote nothing: the guarded call
    /// answers and logs it. `then` makes the answer of the store's verdict;
    /// each caller's is a closure marked `#[inline(always)]`, so that the
    /// verdict goes on to the decision in registers, not through a copy.
    #[inline(always)]
    fn count_in_memory<T>(&self, value: &[u8], cost: u64, then: impl FnOnce(Verdict, Millis) -> T) -> Option<T> {
        let (memory, starts) = self.memory.as_ref()?;
        let ([algorithm], [start]) = (&*self.algorithms, &**starts) else { return None };
        if start.len() + value.len() > MAX_KEY_BYTES {
            return None; // the key names a hash of the value instead (see `CallKeys`)
        }
        // A GCRA's state is one integer: counted with no JSON. The store
        // hands back what the step saw (the TAT as it counts it, and the
        // time) as two integers written in place, and the verdict is worked
        // out again here (the step is pure): made where the decision is, not
        // moved out through the store's return, whose copy stalled on the
        // stores that had just written it (with every key in cache, 0.73 of
        // governor's throughput before, 0.87 after).
        if let Some(rate) = self.only_gcra {
            let (tat, at) = count_gcra(memory, start, value, rate, cost)?;
            return Some(then(gcra_step(rate, Some(tat), at, cost).1, at));
        }
        let counted = memory.count_one_after(start, value, |entry, now| {
            let (write, verdict) = super::outcome::split_one(algorithm.check_cost(entry, now, cost));
            (write, (verdict, now))
        });
        let (verdict, now) = counted.ok()?;
        Some(then(verdict, now))
    }
}

/// One attempt of `cost` on a GCRA at `rate`, whose key is `start` followed by
/// `value`, counted on `memory` as one integer: the TAT (on `rate`) the step
/// counted from and its time (the step's verdict is worked out again from
/// them), or `None` when the key is too long for its text (it names a hash
/// of the value instead: see `CallKeys`) or the count failed, writing nothing.
#[inline(always)]
fn count_gcra(memory: &MemoryStore, start: &KeyStart, value: &[u8], rate: Rate, cost: u64) -> Option<(Millis, Millis)> {
    if start.len() + value.len() > MAX_KEY_BYTES {
        return None;
    }
    let (mut tat, mut at) = (0, 0);
    memory
        .count_number_after(
            start,
            value,
            #[inline(always)]
            |stored, now| {
                let held = rate.held(stored, now);
                tat = super::gcra::counted_from(held, now);
                at = now;
                (rate.keep(stored, held, gcra_step(rate, held, now, cost).0), ())
            },
        )
        .ok()?;
    Some((tat, at))
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
