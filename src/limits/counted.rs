//! One limit ready to count ([`Counted`]): its store keys, its decisions
//! (counted here and now on a store that answers at once, or through a
//! future), its answers by policy when the store is unavailable, and the
//! tallies of each answer.

use std::borrow::Cow;
#[cfg(feature = "axum")]
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::{Clock, SystemClock};
use crate::error::Unavailable;
use crate::log::Throttle;
use crate::store::memory::KeyStart;
use crate::{LimitStore, MemoryStore, Millis, StoreError, Write, MAX_KEY_BYTES};

use super::algorithm::{self, Algorithm, Outcome, Verdict};
use super::decision::Decision;
use super::error::LimitError;
use super::key::CallKeys;
use super::legacy::GuardedLegacy;
use super::limit::{Limit, Part, Policy};
#[cfg(feature = "axum")]
use super::normalize::Ipv4Text;
use super::normalize::{KeyRules, NotAnIp};
use super::tally::Tally;

/// `kind` of the warning that a limit answered by its policy because its
/// store was unavailable.
pub const KIND_DEGRADED: &str = "limit-degraded";
/// `kind` of the line that a limit in shadow mode would have refused an attempt.
pub const KIND_SHADOW_REFUSAL: &str = "limit-shadow-refusal";
/// Where a limit counts.
pub(super) enum Backend {
    Store(Arc<dyn LimitStore>),
    Legacy(Arc<GuardedLegacy>),
}

/// One limit ready to count, with its counters and log throttles.
pub(super) struct Counted {
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
    pub(super) backend: Backend,
    /// The memory store beneath the backend, counted without `dyn Apply`,
    /// with each part's `{limit}:{part}:` hashed for it.
    memory: Option<(MemoryStore, Box<[KeyStart]>)>,
    pub(super) allowed: Tally,
    pub(super) limited: Tally,
    pub(super) degraded: AtomicU64,
    pub(super) shadow_refused: AtomicU64,
    pub(super) degraded_log: Throttle,
    pub(super) shadow_log: Throttle,
}

/// Whether a call needs every part, or only those a reset clears.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    All,
    Resetting,
}

impl Counted {
    pub(super) fn new(limit: Limit, backend: Backend, rules: KeyRules) -> Self {
        let stems: Box<[String]> = limit.parts.iter().map(|p| format!("{}:{}", limit.name, p.name)).collect();
        Counted {
            rules,
            algorithms: limit.parts.iter().map(|p| p.algorithm.clone()).collect(),
            names: limit.parts.iter().map(|p| super::name::interned(&p.name)).collect(),
            memory: match &backend {
                Backend::Store(store) => store
                    .underlying()
                    .and_then(|s| s.downcast_ref::<MemoryStore>())
                    .map(|m| (m.clone(), stems.iter().map(|stem| m.key_start(&format!("{stem}:"))).collect())),
                Backend::Legacy(_) => None,
            },
            stems,
            limit,
            backend,
            allowed: Tally::default(),
            limited: Tally::default(),
            degraded: AtomicU64::new(0),
            shadow_refused: AtomicU64::new(0),
            degraded_log: Throttle::new(),
            shadow_log: Throttle::new(),
        }
    }

    /// The attempt counted here and now, on a store that
    /// [answers at once](LimitStore::update_now): no future, and nothing
    /// kept across an await. `None` when the store has no such path.
    pub(super) fn attempt_now(&self, parts: &[(&str, &str)]) -> Option<Result<Decision, LimitError>> {
        let store = self.answering_at_once()?;
        if let Some(answered) = self.attempt_in_memory(parts) {
            return Some(answered);
        }
        self.attempt_guarded_now(store, parts)
    }

    /// [`attempt_now`](Self::attempt_now) past the memory store's own path:
    /// through the store's (guarded) `update_now`.
    fn attempt_guarded_now(
        &self,
        store: &Arc<dyn LimitStore>,
        parts: &[(&str, &str)],
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
        let mut apply = |current: &[Option<crate::Entry>], now: Millis| {
            let (writes, verdict) = algorithm::decide(self.algorithms.iter(), current, now);
            last = Some((verdict, now));
            writes
        };
        let done = store.update_now(refs, &mut apply)?;
        Some(self.settle(done.and_then(|()| last.ok_or_else(crate::store::no_apply_run))))
    }

    /// [`attempt_now`](Self::attempt_now) of a limit of one part, given its
    /// value (the layer's count: it checked the part when it was built).
    #[cfg(feature = "axum")]
    pub(super) fn attempt_only_now(&self, value: &str) -> Option<Result<Decision, LimitError>> {
        let store = self.answering_at_once()?;
        let [only] = &self.limit.parts[..] else { return None };
        if let Some(answered) = self.count_value_in_memory(only, value) {
            return Some(answered);
        }
        self.attempt_guarded_now(store, &[(&only.name, value)])
    }

    /// [`attempt_only_now`](Self::attempt_only_now) given the client address
    /// `ip`: on the memory store, its text as the part normalizes it is
    /// written from the address, not parsed; elsewhere, the address's text
    /// goes the usual way (the same text: see `KeyRules::address`).
    #[cfg(feature = "axum")]
    pub(super) fn attempt_address_now(&self, ip: IpAddr) -> Option<Result<Decision, LimitError>> {
        let store = self.answering_at_once()?;
        let [only] = &self.limit.parts[..] else { return None };
        if self.memory.is_some() {
            let counted = match KeyRules::ipv4_of(only.normalize, ip) {
                Some(v4) => self.count_in_memory(Ipv4Text::new(v4).as_bytes()),
                None => self.count_in_memory(self.rules.address(only.normalize, ip).as_bytes()),
            };
            if let Some(answered) = counted {
                return Some(answered);
            }
        }
        let text = self.rules.address(super::normalize::Normalize::Exact, ip);
        self.attempt_guarded_now(store, &[(&only.name, &text)])
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
    fn attempt_in_memory(&self, given: &[(&str, &str)]) -> Option<Result<Decision, LimitError>> {
        let ([(name, value)], [part]) = (given, &self.limit.parts[..]) else { return None };
        if *name != part.name {
            return None;
        }
        self.count_value_in_memory(part, value)
    }

    /// `value` of `part`, normalized (or refused), counted on the memory
    /// store: see [`count_in_memory`](Self::count_in_memory).
    fn count_value_in_memory(&self, part: &Part, value: &str) -> Option<Result<Decision, LimitError>> {
        self.memory.as_ref()?;
        match self.rules.apply(part.normalize, value) {
            Ok(normalized) => self.count_in_memory(normalized.as_bytes()),
            Err(_) => Some(Err(self.bad_value(part))),
        }
    }

    /// `value` (normalized text, as bytes) counted on a one-part limit's
    /// memory store with no key text: the store hashes it after the part's
    /// prehashed `{limit}:{part}:`. `None` when this limit has no such path,
    /// and for a count that failed, which wrote nothing: the guarded call
    /// answers and logs it.
    fn count_in_memory(&self, value: &[u8]) -> Option<Result<Decision, LimitError>> {
        let (memory, starts) = self.memory.as_ref()?;
        let ([algorithm], [start]) = (&*self.algorithms, &**starts) else { return None };
        if start.len() + value.len() > MAX_KEY_BYTES {
            return None; // the key names a hash of the value instead (see `CallKeys`)
        }
        let counted = match *algorithm {
            // A GCRA's state is one integer: counted with no JSON.
            Algorithm::Gcra { budget, window } => memory.count_number_after(start, value, |tat, now| {
                let (next, verdict) = super::gcra::step(tat, now, budget, window);
                (next.map(|next| (next, next)), (verdict, now))
            }),
            _ => memory.count_one_after(start, value, |entry, now| {
                let (write, verdict) = super::outcome::split_one(algorithm.check(entry, now));
                (write, (verdict, now))
            }),
        };
        Some(self.settle(Ok(counted.ok()?)))
    }

    /// The decision of an attempt the store answered (or failed). Inlined,
    /// so that the usual decision is written where the caller wants it, not
    /// moved up through each call; a failure is settled out of line.
    #[inline(always)]
    pub(super) fn settle(&self, answered: Result<(Verdict, Millis), StoreError>) -> Result<Decision, LimitError> {
        match answered {
            Ok((verdict, now)) => Ok(self.answer(verdict, now)),
            Err(e) => self.failed(e),
        }
    }

    /// The decision of an attempt the store failed: its policy's, when the
    /// store was unavailable.
    #[cold]
    #[inline(never)]
    fn failed(&self, error: StoreError) -> Result<Decision, LimitError> {
        if error.is_unavailable() {
            return Ok(self.degraded(&error));
        }
        Err(error.into())
    }

    /// Adds to `keys` the store key of each part the call needs, with the
    /// part's index, in the limit's order of parts.
    pub(super) fn keys(&self, given: &[(&str, &str)], need: Need, keys: &mut CallKeys) -> Result<(), LimitError> {
        let limit = &self.limit;
        if let Some((part, value)) = self.only_value(given) {
            // One part given for a limit of one, the usual call: no lists.
            let value = value.map_err(|_| self.bad_value(part))?;
            if need == Need::All || part.resets {
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
                    if need == Need::All || part.resets {
                        keys.push(i, &self.stems[i], &value);
                    }
                }
                None if need == Need::Resetting && !part.resets => {}
                None => {
                    return Err(LimitError::MissingPart {
                        limit: limit.name.clone(),
                        part: part.name.clone(),
                        takes: limit.part_names(),
                    })
                }
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

    /// A value its part's normalization refused (only IPs can be refused).
    fn bad_value(&self, part: &Part) -> LimitError {
        LimitError::BadValue {
            limit: self.limit.name.clone(),
            part: part.name.clone(),
            expected: "an IP address (IPv4 or IPv6)",
        }
    }

    /// The earlier contract: increment every part, allowed while each count
    /// is within its budget.
    pub(super) async fn legacy_attempt(
        &self,
        legacy: &GuardedLegacy,
        keys: &CallKeys,
    ) -> Result<(Verdict, Millis), StoreError> {
        let mut outcomes = Vec::with_capacity(keys.len());
        let mut now = SystemClock.now();
        for (i, key) in keys.iter() {
            let algorithm = &self.limit.parts[i].algorithm;
            let window = Duration::from_millis(u64::try_from(algorithm.window()).unwrap_or(0));
            let (count, reset_at) = legacy.increment(key.to_owned(), window).await?;
            now = SystemClock.now();
            let budget = algorithm.budget();
            outcomes.push(if count <= budget {
                Outcome { allowed: true, remaining: budget - count, reset_at, retry_after: None, write: Write::Keep }
            } else {
                Outcome::refused(0, reset_at, reset_at, now)
            });
        }
        Ok((algorithm::join(outcomes, now).1, now))
    }

    /// The decision of the store's `verdict`; an allowed one inline, a
    /// refusal (tallied, maybe logged) out of line.
    #[inline(always)]
    fn answer(&self, verdict: Verdict, now: Millis) -> Decision {
        let part = &self.limit.parts[verdict.part];
        let decision = Decision {
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
        };
        if verdict.allowed {
            self.allowed.add_one();
            return decision;
        }
        self.refused(decision, &verdict)
    }

    /// `decision`, refused by the part `verdict` names: as a refusal, or
    /// let through by a limit in shadow mode.
    #[inline(never)]
    fn refused(&self, mut decision: Decision, verdict: &Verdict) -> Decision {
        let part = &self.limit.parts[verdict.part];
        decision.limited_by = Some(self.names[verdict.part]);
        if self.limit.shadow {
            self.shadow_refused.fetch_add(1, Ordering::Relaxed);
            if self.shadow_log.ready() {
                tracing::info!(
                    kind = KIND_SHADOW_REFUSAL,
                    limit = %self.limit.name,
                    part = %part.name,
                    would_refuse = self.shadow_refused.load(Ordering::Relaxed),
                    "limit in shadow mode let through an attempt it would refuse"
                );
            }
            decision.allowed = true;
            decision.shadow_refused = true;
            return decision;
        }
        self.limited.add_one();
        let wait = verdict.retry_after.unwrap_or(1).max(1);
        decision.retry_after = Some(Duration::from_millis(u64::try_from(wait).unwrap_or(1)));
        decision
    }

    fn degraded(&self, error: &StoreError) -> Decision {
        let reason = error.unavailable_reason().unwrap_or(Unavailable::StoreFailed);
        let policy = self.limit.policy;
        let total = self.degraded.fetch_add(1, Ordering::Relaxed) + 1;
        if self.degraded_log.ready() {
            tracing::warn!(
                kind = KIND_DEGRADED,
                limit = %self.limit.name,
                reason = reason.as_str(),
                policy = policy.as_str(),
                degraded = total,
                error = %error,
                "limit store unavailable: the limit's policy answered"
            );
        }
        let refuse = policy == Policy::Deny;
        Decision {
            allowed: !refuse || self.limit.shadow,
            remaining: 0,
            reset_at: SystemClock.now(),
            retry_after: None,
            budget: self.limit.parts[0].algorithm.budget(),
            part: self.names[0],
            window: self.limit.parts[0].algorithm.window(),
            now: SystemClock.now(),
            limited_by: None,
            degraded: Some(reason),
            shadow_refused: refuse && self.limit.shadow,
        }
    }
}
