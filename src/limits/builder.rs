//! `LimitsBuilder`: the store, the presets, changes to them, limits of the
//! app's own, and the earlier contract, put together once at startup.

use std::sync::Arc;
use std::time::Duration;

use crate::guard::{bounded, DEFAULT_DEADLINE, DEFAULT_MAX_IN_FLIGHT};
use crate::{Guarded, LimitStore, MemoryStore, Millis};

use super::algorithm::{millis, Algorithm};
use super::backend::Backend;
use super::compiled_limit::CompiledLimit;
use super::error::LimitError;
use super::handle::Limits;
use super::legacy::{GuardedLegacy, RateLimitStore, SERVED};
use super::limit::{Limit, Policy};
use super::normalize::KeyRules;
use super::overrides::Overrides;
use super::presets;

use crate::log::Kind;

impl Limits {
    /// A builder with the presets on and the memory store.
    pub fn builder() -> LimitsBuilder {
        LimitsBuilder::new()
    }
}

/// A change to a limit, applied when the limits are built.
#[derive(Clone, Debug)]
enum Change {
    Policy(Policy),
    Shadow(bool),
    Budget(String, u64),
    Window(String, Millis),
    /// A value of a part with its own budget and window (see [`LimitsBuilder::value_override`]).
    Override {
        part: String,
        value: String,
        budget: u64,
        window: Option<Millis>,
    },
}

/// Builds [`Limits`]: `Limits::builder().store(store).build()`.
#[must_use]
pub struct LimitsBuilder {
    store: Option<Arc<dyn LimitStore>>,
    legacy: Option<Arc<dyn RateLimitStore>>,
    limits: Vec<Limit>,
    changes: Vec<(String, Change)>,
    single_instance: bool,
    deadline: Duration,
    max_in_flight: usize,
    rules: KeyRules,
    previous: Option<Limits>,
}

impl std::fmt::Debug for LimitsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitsBuilder")
            .field("limits", &self.limits.iter().map(Limit::name).collect::<Vec<_>>())
            .field("changes", &self.changes)
            .field("single_instance", &self.single_instance)
            .field("deadline", &self.deadline)
            .field("max_in_flight", &self.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl LimitsBuilder {
    pub(crate) fn new() -> Self {
        LimitsBuilder {
            store: None,
            legacy: None,
            limits: presets::all(),
            changes: Vec::new(),
            single_instance: false,
            deadline: DEFAULT_DEADLINE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            rules: KeyRules::default(),
            previous: None,
        }
    }

    /// Counts in `store` (the memory store when not set). The limits put it
    /// behind a [`Guarded`] of their own, with [`deadline`](Self::deadline)
    /// and [`max_in_flight`](Self::max_in_flight); a store that is already a
    /// `Guarded` is used as it is, with its own deadline and cap.
    pub fn store(mut self, store: Arc<dyn LimitStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// How long a store call may take before it is answered unavailable and
    /// the limit's policy answers (2 s by default), taken between 1 ms and
    /// 1 h as [`Guarded::with_limits`] takes it. For the earlier-contract
    /// store too.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = bounded(deadline);
        self
    }

    /// How many store calls may run at once (64 by default); past that a call
    /// is answered unavailable at once. For the earlier-contract store too.
    pub fn max_in_flight(mut self, max_in_flight: usize) -> Self {
        self.max_in_flight = max_in_flight;
        self
    }

    /// Carries on the counters of `previous` (what each limit answered: see
    /// [`Limits::counters`] and [`Limits::last_hour`]) in the limits of the
    /// same name, as a reload that replaces `previous` wants: answers given on
    /// either count in both.
    pub fn counters_from(mut self, previous: &Limits) -> Self {
        self.previous = Some(previous.clone());
        self
    }

    /// Keeps a store of the earlier contract serving the `sign-in` and `api`
    /// limits; the other limits count in the limit store.
    pub fn legacy_store(mut self, store: Arc<dyn RateLimitStore>) -> Self {
        self.legacy = Some(store);
        self
    }

    /// Says the site runs as one instance, so a store that is not shared
    /// (the memory store) loses nothing: no startup warning.
    pub fn single_instance(mut self, single: bool) -> Self {
        self.single_instance = single;
        self
    }

    /// Starts from no limits instead of the presets.
    pub fn without_presets(mut self) -> Self {
        self.limits.clear();
        self
    }

    /// Adds a limit of the app's own, or replaces the one of the same name:
    /// a preset's policy or shadow mode changes this way,
    /// `.limit(presets::named("api").unwrap().policy(Policy::Deny))`
    /// ([`presets::named`](super::presets::named)).
    pub fn limit(mut self, limit: Limit) -> Self {
        match self.limits.iter_mut().find(|l| l.name == limit.name) {
            Some(slot) => *slot = limit,
            None => self.limits.push(limit),
        }
        self
    }

    /// Sets what limit `limit` answers when its store is unavailable (in
    /// code: pass the limit, as [`presets::named`] gives it, to
    /// [`limit`](Self::limit) with its [`Limit::policy`]).
    pub(crate) fn policy(self, limit: &str, policy: Policy) -> Self {
        self.change(limit, Change::Policy(policy))
    }

    /// Puts limit `limit` in or out of shadow mode (in code:
    /// [`Limit::shadow`], as for [`policy`](Self::policy)).
    pub(crate) fn shadow(self, limit: &str, shadow: bool) -> Self {
        self.change(limit, Change::Shadow(shadow))
    }

    /// Sets the budget of `part` of limit `limit`.
    pub fn budget(self, limit: &str, part: &str, budget: u64) -> Self {
        self.change(limit, Change::Budget(part.to_owned(), budget))
    }

    /// Sets the window of `part` of limit `limit`.
    pub fn window(self, limit: &str, part: &str, window: Duration) -> Self {
        self.change(limit, Change::Window(part.to_owned(), millis(window)))
    }

    /// Gives `value` of `part` of limit `limit` (as the part normalises it)
    /// its own `budget` per `window` (the part's window when `None`),
    /// counted by the part's algorithm: a customer's plan, an allow-listed
    /// network. For a preset and a limit of the app's own alike. Given
    /// twice, the last one counts. A limit kept on an earlier-contract store
    /// ([`legacy_store`](Self::legacy_store)) counts by the part's budget.
    pub fn value_override(self, limit: &str, part: &str, value: &str, budget: u64, window: Option<Duration>) -> Self {
        let change =
            Change::Override { part: part.to_owned(), value: value.to_owned(), budget, window: window.map(millis) };
        self.change(limit, change)
    }

    /// IPv6 addresses of `ip` parts count per network of this many bits: 64
    /// by default (what one client is handed), 128 per address. IPv4 counts
    /// per address, and an IPv4-mapped IPv6 address as its IPv4 address.
    /// The one place the network is set: an address handed over as the
    /// address ([`LimitHandle::attempt_address_now`](super::LimitHandle::attempt_address_now),
    /// the [layer](crate::layer)) counts as its client's network on any part.
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.rules.ipv6_prefix = bits.min(128);
        self
    }

    /// Folds the values of account and destination parts by
    /// [`Normalize::Folded`](super::normalize::Normalize::Folded)'s Unicode
    /// rule, so `Ada@Example.com`, `ａｄａ@example.com` and `ada@example.com`
    /// share one budget; on by default.
    pub fn fold_case(mut self, fold: bool) -> Self {
        self.rules.fold_case = fold;
        self
    }

    fn change(mut self, limit: &str, change: Change) -> Self {
        self.changes.push((limit.to_owned(), change));
        self
    }

    /// Applies the changes, checks every limit, and wraps the store in its
    /// guard. Logs a warning (`kind = "limit-store-not-shared"`) when the
    /// store is not shared between instances and
    /// [`single_instance`](Self::single_instance) is not set.
    pub fn build(self) -> Result<Limits, LimitError> {
        let mut limits = self.limits;
        for (name, change) in self.changes {
            let known: Vec<String> = limits.iter().map(|l| l.name.clone()).collect();
            let Some(limit) = limits.iter_mut().find(|l| l.name == name) else {
                return Err(LimitError::UnknownLimit { name, known });
            };
            match change {
                Change::Policy(policy) => limit.policy = policy,
                Change::Shadow(shadow) => limit.shadow = shadow,
                Change::Budget(part, budget) => part_of(limit, &part)?.set_budget(budget),
                Change::Window(part, window) => part_of(limit, &part)?.set_window(window),
                Change::Override { part, value, budget, window } => {
                    part_of(limit, &part)?;
                    if let Some(p) = limit.part_named_mut(&part) {
                        p.set_override(&value, budget, window);
                    }
                }
            }
        }
        for limit in &limits {
            if let Some(detail) = limit.problem() {
                return Err(LimitError::Invalid { limit: limit.name.clone(), detail });
            }
        }

        let inner = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let store: Arc<dyn LimitStore> = if inner.is_guarded() {
            inner
        } else {
            Arc::new(Guarded::with_limits(inner, self.deadline, self.max_in_flight))
        };
        if !store.shared() && !self.single_instance {
            tracing::warn!(
                kind = Kind::NotShared.as_str(),
                "limit counts are kept in this process only: on several instances every budget is multiplied by their number; use the database store, or set rate_limit.single_instance = true if the site runs as one instance"
            );
        }
        let in_store: Arc<dyn Backend> = Arc::new(store.clone());
        let legacy = self.legacy.map(|l| Arc::new(GuardedLegacy::new(l, self.deadline, self.max_in_flight)));
        let compiled: Vec<(String, CompiledLimit)> = limits
            .into_iter()
            .map(|limit| {
                let backend: Arc<dyn Backend> = match &legacy {
                    Some(legacy) if SERVED.contains(&limit.name.as_str()) => legacy.clone(),
                    _ => in_store.clone(),
                };
                let answers = self.previous.as_ref().and_then(|p| p.answers(&limit.name)).unwrap_or_default();
                let overrides = Overrides::of(&limit, self.rules)?;
                Ok((
                    limit.name.clone(),
                    CompiledLimit::new(limit, backend, self.rules, answers).with_overrides(overrides),
                ))
            })
            .collect::<Result<_, LimitError>>()?;
        Ok(Limits::new(compiled))
    }
}

/// The algorithm of `part` of `limit`, for a change.
fn part_of<'a>(limit: &'a mut Limit, part: &str) -> Result<&'a mut Algorithm, LimitError> {
    let takes = limit.part_names();
    let name = limit.name.clone();
    limit.part_named_mut(part).map(|p| &mut p.algorithm).ok_or_else(|| LimitError::UnknownPart {
        limit: name,
        part: part.to_owned(),
        takes,
    })
}
