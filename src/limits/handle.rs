//! [`Limits`]: the limits of an app as built, and the calls it makes on them
//! (an attempt, a reset, the counters and the store's stats).

use std::sync::Arc;
use std::task::Poll;

use crate::transaction::refuse_in_transaction;
use crate::Millis;

use super::answers::Answers;
use super::backend::CostNotCounted;
use super::compiled_limit::{CompiledLimit, Given, PartsNeeded};
use super::decision::{Decision, LimitCounters};
use super::error::LimitError;
use super::last_hour::LastHour;
use super::limit::Limit;
use super::name_table::NameTable;
use super::overrides;
use super::store_key::CallKeys;

/// The limit an attempt counts on, or the name that found no limit.
pub(super) type Found<'a> = Result<&'a CompiledLimit, &'a str>;

/// The limits of an app, counting in one store. Cheap to clone.
#[derive(Clone)]
pub struct Limits {
    limits: Arc<NameTable<CompiledLimit>>,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limits").field("limits", &self.names()).finish_non_exhaustive()
    }
}

impl Limits {
    /// The limits ready to count, by name, as the builder put them together.
    pub(super) fn new(limits: Vec<(String, CompiledLimit)>) -> Self {
        Limits { limits: Arc::new(NameTable::new(limits)) }
    }

    /// An attempt of `cost` on the limit `found` here and now, on a store
    /// that answers at once; `Pending` when the store answers through a
    /// future, and nothing was counted. The way from an attempt's future to
    /// its decision: [`attempt_later`](Self::attempt_later) goes on from it;
    /// a [`LimitHandle`](super::LimitHandle)'s answers here and now take
    /// [`CompiledLimit::answer_now`], its twin. Inlined into the future's body,
    /// which the compiler inlines whole.
    #[inline(always)]
    pub(super) fn attempt_at_once(
        &self,
        found: Found<'_>,
        given: Given<'_>,
        cost: u64,
    ) -> Poll<Result<Decision, LimitError>> {
        if let Err(e) = refuse_in_transaction() {
            return Poll::Ready(Err(e.into()));
        }
        let compiled = match found {
            Ok(compiled) => compiled,
            Err(name) => return Poll::Ready(Err(self.unknown(name))),
        };
        compiled.attempt_now(given, cost)
    }

    /// [`attempt_cost`](Self::attempt_cost) on `compiled` through a future
    /// (after [`attempt_at_once`](Self::attempt_at_once) answered
    /// `Pending`): the usual one through the store's integer counts, when
    /// they answer through a future; any other by the limit's backend.
    pub(super) async fn attempt_later(
        &self,
        compiled: &CompiledLimit,
        parts: &[(&str, &str)],
        cost: u64,
    ) -> Result<Decision, LimitError> {
        if let Some(decided) = compiled.gcra_later(Given::Parts(parts), cost).await {
            return decided;
        }
        let mut keys = CallKeys::new();
        compiled.keys(parts, PartsNeeded::All, &mut keys)?;
        let overridden = compiled.algorithms_for(&keys);
        let algorithms = overridden.as_ref().unwrap_or(&compiled.algorithms);
        let answered =
            compiled.backend.count(&keys, algorithms, cost).await.map_err(|CostNotCounted| {
                LimitError::CostNotCounted { limit: compiled.limit.name().to_owned(), cost }
            })?;
        let decided = compiled.settle(answered, cost);
        match &overridden {
            Some(algorithms) => overrides::with_budgets_of(&compiled.limit, decided, algorithms),
            None => decided,
        }
    }

    /// Clears limit `name`'s counts for the given parts: call it on a success
    /// (the right password, the right code). Parts marked
    /// [`kept_on_reset`](super::limit::Part::kept_on_reset) keep counting and may be omitted.
    ///
    /// Refused inside [`in_transaction`](crate::in_transaction).
    pub async fn reset(&self, name: &str, parts: &[(&str, &str)]) -> Result<(), LimitError> {
        refuse_in_transaction()?;
        let compiled = self.get(name)?;
        let mut keys = CallKeys::new();
        compiled.keys(parts, PartsNeeded::Resetting, &mut keys)?;
        if keys.is_empty() {
            return Ok(());
        }
        Ok(compiled.backend.reset(&keys).await?)
    }

    /// The definition of limit `name`, as built (overrides applied).
    pub fn limit(&self, name: &str) -> Option<&Limit> {
        self.limits.get(name).map(|c| &c.limit)
    }

    /// What limit `name` answered so far, to carry on in the limits a
    /// reload builds.
    pub(super) fn answers(&self, name: &str) -> Option<Arc<Answers>> {
        self.limits.get(name).map(|c| c.answers.clone())
    }

    /// The names of the limits, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.limits.names().map(str::to_owned).collect();
        names.sort();
        names
    }

    /// How often limit `name` gave each answer.
    pub fn counters(&self, name: &str) -> Option<LimitCounters> {
        self.limits.get(name).map(|c| c.answers.counters())
    }

    /// What limit `name` answered in each minute of the hour that ends with
    /// the minute of `now` (on the store's clock; the wall clock's
    /// [`SystemClock`](crate::clock::SystemClock) for most stores).
    pub fn last_hour(&self, name: &str, now: Millis) -> Option<LastHour> {
        self.limits.get(name).map(|c| c.answers.last_hour(now))
    }

    #[inline]
    fn get(&self, name: &str) -> Result<&CompiledLimit, LimitError> {
        self.limits.get(name).ok_or_else(|| self.unknown(name))
    }

    /// Limit `name`, or the name when there is none.
    #[inline]
    pub(super) fn found<'a>(&'a self, name: &'a str) -> Found<'a> {
        self.limits.get(name).ok_or(name)
    }

    /// The limits by name.
    pub(super) fn table(&self) -> &NameTable<CompiledLimit> {
        &self.limits
    }

    #[cold]
    #[inline(never)]
    pub(super) fn unknown(&self, name: &str) -> LimitError {
        LimitError::UnknownLimit { name: name.to_owned(), known: self.names() }
    }
}
