//! A store's integer counts, where it offers them (a capability beside the
//! contract: see [`IntegerCounts`](crate::IntegerCounts)); a store that
//! offers none passes.

use std::sync::Arc;

use tokio::task::JoinSet;

use super::super::support::*;
use super::super::StorePair;
use crate::{AsyncIntegerCounter, GcraCounted, GcraStep, IntegerCounter, LimitStore, StoreError};

/// A handle's integer counter of one prefix, of either kind.
enum Counter {
    Now(Box<dyn IntegerCounter>),
    Later(Box<dyn AsyncIntegerCounter>),
}

impl Counter {
    /// `store`'s counter of the keys after `prefix`, if it offers one.
    fn of(store: &dyn LimitStore, prefix: &str) -> Option<Counter> {
        let counts = store.integer_counts()?;
        match counts.counter(prefix) {
            Some(now) => Some(Counter::Now(now)),
            None => counts.async_counter(prefix).map(Counter::Later),
        }
    }

    async fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        match self {
            Counter::Now(counter) => counter.count(rest, step),
            Counter::Later(counter) => counter.count(rest, step).await,
        }
    }
}

/// Tasks on both handles count one key through the integer counts, on a
/// budget of 37 an hour: exactly 37 are allowed, every refusal counted from
/// the TAT the key holds, and the key holds what a count through `update`
/// leaves: the interval as its value, the TAT as its expiry.
pub async fn integer_counts_from_both_handles_are_exact(pair: StorePair) -> Outcome {
    const TASKS: usize = 8;
    const EACH: usize = 10;
    const BUDGET: u64 = 37;
    let rule = "an integer count is atomic: across instances a budget is never exceeded, and the key holds what update would read";
    let key = unique_keys(1).remove(0);
    let (prefix, rest) = key.rsplit_once(':').map(|(p, r)| (format!("{p}:"), r.to_owned())).unwrap_or_default();
    let (Some(first), Some(second)) = (Counter::of(&*pair.first, &prefix), Counter::of(&*pair.second, &prefix)) else {
        return Ok(());
    };
    let counters = [Arc::new(first), Arc::new(second)];
    let step = GcraStep::new(BUDGET, 3_600_000, 1);
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let (counter, rest) = (counters[t % 2].clone(), rest.clone());
        tasks.spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..EACH {
                seen.push(answered(counter.count(&rest, step).await, "an integer count")?);
            }
            Ok::<_, crate::testing::ContractViolation>(seen)
        });
    }
    let mut counted = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let seen = joined.map_err(|e| {
            crate::testing::ContractViolation::new(RULE_ANSWERS, "every task finishes", format!("a task failed: {e}"))
        })??;
        counted.extend(seen);
    }
    let allowed = counted.iter().filter(|c| c.allowed).count();
    ensure(allowed as u64 == BUDGET, rule, format!("{BUDGET} allowed"), || format!("{allowed} allowed"))?;
    let held = read(&*pair.second, &[key.as_str()]).await?.remove(0);
    let tats: Vec<_> = counted.iter().filter(|c| !c.allowed).map(|c| c.tat).collect();
    let agrees = held.as_ref().is_some_and(|entry| {
        entry.value == serde_json::json!(step.interval()) && tats.iter().all(|&tat| tat == entry.expires_at)
    });
    ensure(agrees, rule, format!("the interval {} held until the TAT every refusal saw", step.interval()), || {
        format!("{held:?}; refusals saw TATs {tats:?}")
    })
}
