//! Limits built on the store: what an app calls before a sign-in, a password
//! reset, a code sent or checked, or an API call.
//!
//! A [`Limit`] counts attempts per each of its parts (an account, an IP), each
//! part a key in the store with its own [`Algorithm`] and budget. One attempt
//! is one atomic [`update`](crate::LimitStore::update) over all of the limit's
//! keys: allowed only when every part has budget left, and then counted on
//! every part. Being limited is a [`Decision`], not an error; so is a store
//! that could not answer, which each limit maps by its [`Policy`].
//!
//! ```
//! use std::sync::Arc;
//! use limit_store::{Limits, MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), limit_store::LimitError> {
//! let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build()?;
//! let d = limits.attempt("sign-in", &[("account", "ada@example.com"), ("ip", "192.0.2.7")]).await?;
//! assert!(d.allowed);
//! // The password was right: clear the account's failures.
//! limits.reset("sign-in", &[("account", "ada@example.com")]).await?;
//! # Ok(()) }
//! ```

pub mod algorithm;
mod builder;
mod decision;
mod error;
pub mod gcra;
mod key;
pub mod legacy;
mod limit;
pub mod lockout;
pub mod normalize;
pub mod outcome;
pub mod presets;
mod tally;
pub mod window;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::{Clock, SystemClock};
use crate::error::Unavailable;
use crate::log::Throttle;
use crate::transaction::refuse_in_transaction;
use crate::{update_with, LimitStore, Millis, StoreError, Write};

pub use algorithm::Algorithm;
pub use builder::LimitsBuilder;
pub use decision::{Decision, LimitCounters};
pub use error::LimitError;
pub use legacy::RateLimitStore;
pub use limit::{Limit, Part, Policy};
pub use normalize::Normalize;

use algorithm::{Outcome, Verdict};
use key::CallKeys;
use legacy::GuardedLegacy;
use normalize::KeyRules;
use tally::Tally;

/// `kind` of the warning that a limit answered by its policy because its
/// store was unavailable.
pub const KIND_DEGRADED: &str = "limit-degraded";
/// `kind` of the line that a limit in shadow mode would have refused an attempt.
pub const KIND_SHADOW_REFUSAL: &str = "limit-shadow-refusal";
/// `kind` of the startup warning that counts are not shared between instances.
pub const KIND_NOT_SHARED: &str = "limit-store-not-shared";

/// Where a limit counts.
enum Backend {
    Store(Arc<dyn LimitStore>),
    Legacy(Arc<GuardedLegacy>),
}

/// One limit ready to count, with its counters and log throttles.
struct Counted {
    limit: Limit,
    /// How values are made one before they are counted.
    rules: KeyRules,
    /// The parts' algorithms, shared with the `apply` of calls that may
    /// outlive their caller.
    algorithms: Arc<[Algorithm]>,
    /// Each part's `{limit}:{part}`, the start of its keys.
    stems: Box<[String]>,
    backend: Backend,
    allowed: Tally,
    limited: Tally,
    degraded: AtomicU64,
    shadow_refused: AtomicU64,
    degraded_log: Throttle,
    shadow_log: Throttle,
}

/// Whether a call needs every part, or only those a reset clears.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    All,
    Resetting,
}

/// The limits of an app, counting in one store. Cheap to clone.
#[derive(Clone)]
pub struct Limits {
    /// By name; foldhash, since the names are the app's own, not a client's.
    limits: Arc<hashbrown::HashMap<String, Counted>>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits").field("limits", &self.names()).finish_non_exhaustive()
    }
}

impl Limits {
    /// A builder with the presets on and the memory store.
    pub fn builder() -> LimitsBuilder {
        LimitsBuilder::new()
    }

    /// Counts one attempt on limit `name` for the given parts, as
    /// `(part, value)` pairs in any order (values are any UTF-8: emails, IPs).
    ///
    /// Refused inside [`in_transaction`](crate::in_transaction).
    pub async fn attempt(&self, name: &str, parts: &[(&str, &str)]) -> Result<Decision, LimitError> {
        refuse_in_transaction()?;
        let counted = self.get(name)?;
        if let Some(answered) = counted.attempt_now(parts) {
            return answered;
        }
        let mut keys = CallKeys::new();
        counted.keys(parts, Need::All, &mut keys)?;
        let refs = keys.refs();
        let answered = match &counted.backend {
            Backend::Store(store) if store.answers_at_once() => {
                let algorithms = &counted.algorithms;
                update_with(&**store, &refs, |current, now| {
                    let (writes, verdict) = algorithm::decide(algorithms.iter(), current, now);
                    (writes, (verdict, now))
                })
                .await
            }
            Backend::Store(store) => {
                let algorithms = counted.algorithms.clone();
                let answer = Arc::new(parking_lot::Mutex::new(None));
                let last = answer.clone();
                let apply = move |current: &[Option<crate::Entry>], now: Millis| {
                    let (writes, verdict) = algorithm::decide(algorithms.iter(), current, now);
                    *last.lock() = Some((verdict, now));
                    writes
                };
                match store.update_owned(&refs, Box::new(apply)).await {
                    Ok(()) => answer.lock().take().ok_or_else(crate::store::no_apply_run),
                    Err(e) => Err(e),
                }
            }
            Backend::Legacy(legacy) => counted.legacy_attempt(legacy, &keys).await,
        };
        counted.settle(answered)
    }

    /// [`attempt`](Self::attempt) without a future, for a store that
    /// [answers at once](LimitStore::update_now) (the memory store); `None`
    /// when it doesn't, and the caller awaits `attempt` instead. Nothing is
    /// counted when it answers `None`.
    #[cfg(feature = "axum")]
    pub(crate) fn attempt_at_once(&self, name: &str, parts: &[(&str, &str)]) -> Option<Result<Decision, LimitError>> {
        if let Err(e) = refuse_in_transaction() {
            return Some(Err(e.into()));
        }
        match self.get(name) {
            Ok(counted) => counted.attempt_now(parts),
            Err(e) => Some(Err(e)),
        }
    }

    /// Clears limit `name`'s counts for the given parts: call it on a success
    /// (the right password, the right code). Parts marked
    /// [`kept_on_reset`](Part::kept_on_reset) keep counting and may be omitted.
    ///
    /// Refused inside [`in_transaction`](crate::in_transaction).
    pub async fn reset(&self, name: &str, parts: &[(&str, &str)]) -> Result<(), LimitError> {
        refuse_in_transaction()?;
        let counted = self.get(name)?;
        let mut keys = CallKeys::new();
        counted.keys(parts, Need::Resetting, &mut keys)?;
        if keys.is_empty() {
            return Ok(());
        }
        match &counted.backend {
            Backend::Store(store) => {
                let refs = keys.refs();
                store
                    .update_owned(
                        &refs,
                        Box::new(|current: &[Option<crate::Entry>], _| vec![Write::Delete; current.len()]),
                    )
                    .await?;
            }
            Backend::Legacy(legacy) => {
                for (_, key) in keys.iter() {
                    legacy.reset(key.to_owned()).await?;
                }
            }
        }
        Ok(())
    }

    /// The store's fill and sweeps (see [`LimitStore::stats`]).
    pub fn store_stats(&self) -> Option<crate::StoreStats> {
        self.limits.values().find_map(|c| match &c.backend {
            Backend::Store(store) => store.stats(),
            Backend::Legacy(_) => None,
        })
    }

    /// Whether the store answers: one read through its guard. For health checks.
    pub async fn check_store(&self) -> Result<(), StoreError> {
        let store = self.limits.values().find_map(|c| match &c.backend {
            Backend::Store(store) => Some(store),
            Backend::Legacy(_) => None,
        });
        match store {
            Some(store) => store.read(&["limit-store:health"]).await.map(drop),
            None => Ok(()),
        }
    }

    /// The definition of limit `name`, as built (overrides applied).
    pub fn limit(&self, name: &str) -> Option<&Limit> {
        self.limits.get(name).map(|c| &c.limit)
    }

    /// The names of the limits, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.limits.keys().cloned().collect();
        names.sort();
        names
    }

    /// How often limit `name` gave each answer.
    pub fn counters(&self, name: &str) -> Option<LimitCounters> {
        self.limits.get(name).map(|c| LimitCounters {
            allowed: c.allowed.total(),
            limited: c.limited.total(),
            degraded: c.degraded.load(Ordering::Relaxed),
            shadow_refused: c.shadow_refused.load(Ordering::Relaxed),
        })
    }

    /// Attempts answered by an unavailable policy, over every limit.
    pub fn degraded_total(&self) -> u64 {
        self.limits.values().map(|c| c.degraded.load(Ordering::Relaxed)).sum()
    }

    fn get(&self, name: &str) -> Result<&Counted, LimitError> {
        self.limits.get(name).ok_or_else(|| LimitError::UnknownLimit { name: name.to_owned(), known: self.names() })
    }
}

impl Counted {
    fn new(limit: Limit, backend: Backend, rules: KeyRules) -> Self {
        Counted {
            rules,
            algorithms: limit.parts.iter().map(|p| p.algorithm.clone()).collect(),
            stems: limit.parts.iter().map(|p| format!("{}:{}", limit.name, p.name)).collect(),
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
    fn attempt_now(&self, parts: &[(&str, &str)]) -> Option<Result<Decision, LimitError>> {
        let Backend::Store(store) = &self.backend else { return None };
        if !store.answers_at_once() {
            return None;
        }
        let mut keys = CallKeys::new();
        if let Err(e) = self.keys(parts, Need::All, &mut keys) {
            return Some(Err(e));
        }
        let refs = keys.refs();
        let mut last = None;
        let mut apply = |current: &[Option<crate::Entry>], now: Millis| {
            let (writes, verdict) = algorithm::decide(self.algorithms.iter(), current, now);
            last = Some((verdict, now));
            writes
        };
        let done = store.update_now(&refs, &mut apply)?;
        Some(self.settle(done.and_then(|()| last.ok_or_else(crate::store::no_apply_run))))
    }

    /// The decision of an attempt the store answered (or failed).
    fn settle(&self, answered: Result<(Verdict, Millis), StoreError>) -> Result<Decision, LimitError> {
        match answered {
            Ok((verdict, now)) => Ok(self.answer(verdict, now)),
            Err(e) if e.is_unavailable() => Ok(self.degraded(&e)),
            Err(e) => Err(e.into()),
        }
    }

    /// Adds to `keys` the store key of each part the call needs, with the
    /// part's index, in the limit's order of parts.
    fn keys(&self, given: &[(&str, &str)], need: Need, keys: &mut CallKeys) -> Result<(), LimitError> {
        let limit = &self.limit;
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
                    let value = self.rules.apply(part.normalize, value).map_err(|_| LimitError::BadValue {
                        limit: limit.name.clone(),
                        part: part.name.clone(),
                        expected: "an IP address (IPv4 or IPv6)",
                    })?;
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

    /// The earlier contract: increment every part, allowed while each count
    /// is within its budget.
    async fn legacy_attempt(&self, legacy: &GuardedLegacy, keys: &CallKeys) -> Result<(Verdict, Millis), StoreError> {
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

    fn answer(&self, verdict: Verdict, now: Millis) -> Decision {
        let part = &self.limit.parts[verdict.part];
        let mut decision = Decision {
            allowed: verdict.allowed,
            remaining: verdict.remaining,
            reset_at: verdict.reset_at,
            retry_after: None,
            budget: part.algorithm.budget(),
            part: part.name.clone(),
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
        decision.limited_by = Some(part.name.clone());
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
            part: self.limit.parts[0].name.clone(),
            window: self.limit.parts[0].algorithm.window(),
            now: SystemClock.now(),
            limited_by: None,
            degraded: Some(reason),
            shadow_refused: refuse && self.limit.shadow,
        }
    }
}
