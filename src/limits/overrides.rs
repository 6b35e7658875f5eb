//! Budgets of single values: a customer's plan, an allow-listed office
//! network. A part may give some of its values (as normalised) their own
//! budget and window; every other value counts by the part's own.
//!
//! A limit with overrides counts through the store's general path (its
//! values are looked up once per attempt); a limit without any keeps the
//! store's integer count and pays for nothing here.

use std::collections::HashMap;
use std::sync::Arc;

use super::algorithm::{smallest_budget, Algorithm};
use super::decision::Decision;
use super::error::LimitError;
use super::limit::Limit;
use super::normalize::KeyRules;
use super::store_key::{plain_value, CallKeys};
use crate::MAX_KEY_BYTES;

/// The overridden values of a limit's parts, normalised, with the algorithm
/// each counts by.
#[derive(Debug)]
pub(super) struct Overrides {
    /// Per part, in the limit's order: value → its algorithm.
    by_part: Box<[HashMap<String, Algorithm>]>,
}

impl Overrides {
    /// The overrides of `limit`, its values normalised by `rules`; `None`
    /// when it has none. A value that its part refuses (not an IP address
    /// for an `ip` part), or whose algorithm can't count, is an error.
    pub(super) fn of(limit: &Limit, rules: KeyRules) -> Result<Option<Self>, LimitError> {
        if limit.parts.iter().all(|p| p.overrides.is_empty()) {
            return Ok(None);
        }
        let invalid = |detail: String| LimitError::Invalid { limit: limit.name.clone(), detail };
        let mut by_part = Vec::with_capacity(limit.parts.len());
        for part in &limit.parts {
            let mut values = HashMap::new();
            let mut given: HashMap<String, &str> = HashMap::new();
            for o in &part.overrides {
                let value = rules.apply(part.normalize, &o.value).map_err(|_| {
                    invalid(format!(
                        "part `{}`: the override `{}` is not an IP address (the part counts addresses): write it as 192.0.2.7 or 2001:db8::/64",
                        part.name, o.value
                    ))
                })?;
                if limit.name.len() + part.name.len() + 2 + value.len() > MAX_KEY_BYTES {
                    return Err(invalid(format!(
                        "part `{}`: the override value is over {MAX_KEY_BYTES} bytes with its limit and part names: shorten it",
                        part.name
                    )));
                }
                let algorithm = part.overridden(o);
                if let Some(problem) = algorithm.problem() {
                    return Err(invalid(format!("part `{}`, override `{}`: {problem}", part.name, o.value)));
                }
                // Two values that normalise alike would have the last one's
                // budget, the other's never read: refused, naming both.
                if let Some(earlier) = given.insert(value.to_string(), &o.value) {
                    return Err(invalid(format!(
                        "part `{}`: the overrides `{earlier}` and `{}` are the same value once normalised (`{value}`): keep one",
                        part.name, o.value
                    )));
                }
                values.insert(value.into_owned(), algorithm);
            }
            by_part.push(values);
        }
        Ok(Some(Overrides { by_part: by_part.into_boxed_slice() }))
    }
}

impl Overrides {
    /// The algorithms `keys` count by, the limit's own being `algorithms`
    /// and its parts' stems `stems`: `None` when no value of theirs has an
    /// override (the limit's own algorithms count them).
    #[inline]
    pub(super) fn algorithms_for(
        &self,
        stems: &[String],
        algorithms: &[Algorithm],
        keys: &CallKeys,
    ) -> Option<Arc<[Algorithm]>> {
        let mut chosen: Option<Vec<Algorithm>> = None;
        for (i, key) in keys.iter() {
            // A key is `{stem}:{value}`; a long value is hashed (`{stem}#…`)
            // and has no override (their values are checked to fit).
            let Some(value) = plain_value(&stems[i], key) else {
                continue;
            };
            if let Some(algorithm) = self.by_part[i].get(value) {
                chosen.get_or_insert_with(|| algorithms.to_vec())[i] = algorithm.clone();
            }
        }
        chosen.map(Arc::from)
    }
}

/// `decided` on `limit` with the budgets `algorithms` count by (an
/// overridden value's own): a decision's as [`with_budget_of`] gives them,
/// and a cost over the budget with the budget that refused it.
pub(super) fn with_budgets_of(
    limit: &Limit,
    decided: Result<Decision, LimitError>,
    algorithms: &[Algorithm],
) -> Result<Decision, LimitError> {
    match decided {
        Ok(decision) => Ok(with_budget_of(limit, decision, algorithms)),
        Err(LimitError::CostOverBudget { limit: name, part, cost, budget }) => {
            // The smallest budget these keys count by, an override's included.
            match smallest_budget(algorithms.iter()) {
                Some(i) if i < limit.parts.len() => Err(LimitError::CostOverBudget {
                    limit: name,
                    part: limit.parts[i].name.clone(),
                    cost,
                    budget: algorithms[i].budget(),
                }),
                _ => Err(LimitError::CostOverBudget { limit: name, part, cost, budget }),
            }
        }
        Err(e) => Err(e),
    }
}

/// `decision` with the budget and window of the part that answered as
/// `algorithms` count it (an overridden value's own), and each part's
/// budget in its [`parts`](Decision::parts) likewise.
fn with_budget_of(limit: &Limit, mut decision: Decision, algorithms: &[Algorithm]) -> Decision {
    if let Some(i) = limit.parts.iter().position(|p| p.name == decision.part) {
        decision.budget = algorithms[i].budget();
        decision.window = algorithms[i].window();
    }
    if let Some(others) = decision.others.as_deref_mut() {
        for (left, algorithm) in others.iter_mut().zip(algorithms) {
            left.budget = algorithm.budget();
        }
    }
    decision
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limits::limit::Part;
    use crate::limits::{Limits, Normalize};
    use crate::MemoryStore;

    #[tokio::test]
    async fn an_overridden_value_counts_by_its_own_budget_and_others_by_the_part() {
        let limit = Limit::new("plans").part(
            Part::new("customer", Algorithm::fixed_window(2, Duration::from_secs(60)))
                .normalized(Normalize::Folded)
                .with_override("big-co", 4, None),
        );
        let limits = Limits::builder()
            .store(Arc::new(MemoryStore::new()))
            .single_instance(true)
            .without_presets()
            .limit(limit)
            .build()
            .unwrap();
        let allowed = |customer: &'static str| {
            let limits = limits.clone();
            async move {
                let mut n = 0;
                for _ in 0..10 {
                    let d = limits.attempt("plans", &[("customer", customer)]).await.unwrap();
                    if d.allowed {
                        assert_eq!(d.budget, if customer == "small" { 2 } else { 4 });
                        n += 1;
                    }
                }
                n
            }
        };
        assert_eq!(allowed("small").await, 2);
        // Folded as the part folds it: `BIG-CO` is `big-co`.
        assert_eq!(allowed("BIG-CO").await, 4);
    }

    /// A cost over an overridden value's budget is refused with that
    /// budget, not the part's; one over the part's but within the value's
    /// is counted.
    #[tokio::test]
    async fn a_cost_over_the_budget_says_the_budget_that_applied() {
        let guarded = crate::Guarded::new(Arc::new(MemoryStore::new()));
        for store in [Arc::new(MemoryStore::new()) as Arc<dyn crate::LimitStore>, Arc::new(guarded)] {
            let limit = Limit::new("tokens").part(
                Part::new("user", Algorithm::gcra(37, Duration::from_secs(3600))).with_override("big-co", 61, None),
            );
            let limits =
                Limits::builder().store(store).single_instance(true).without_presets().limit(limit).build().unwrap();
            let over = |user: &'static str, cost| {
                let limits = limits.clone();
                async move { limits.attempt_cost("tokens", &[("user", user)], cost).await }
            };
            let budget_of = |e: LimitError| match e {
                LimitError::CostOverBudget { budget, .. } => budget,
                e => panic!("{e}"),
            };
            assert_eq!(budget_of(over("small", 38).await.unwrap_err()), 37);
            assert_eq!(budget_of(over("big-co", 62).await.unwrap_err()), 61, "the override's budget");
            assert!(over("big-co", 40).await.unwrap().allowed);
        }
    }

    /// A cost over several parts' budgets names the smallest, an override's
    /// included: the most the keys may count at once.
    #[tokio::test]
    async fn a_cost_over_several_budgets_names_the_smallest() {
        let ms = Duration::from_secs(3600);
        let limit = Limit::new("tokens")
            .part(Part::new("user", Algorithm::fixed_window(5, ms)).with_override("big-co", 100, None))
            .part(Part::new("ip", Algorithm::fixed_window(50, ms)));
        let store = Arc::new(MemoryStore::new());
        let limits =
            Limits::builder().store(store).single_instance(true).without_presets().limit(limit).build().unwrap();
        for (user, part, budget) in [("small", "user", 5), ("big-co", "ip", 50)] {
            match limits.attempt_cost("tokens", &[("user", user), ("ip", "192.0.2.1")], 101).await {
                Err(LimitError::CostOverBudget { part: p, budget: b, .. }) => {
                    assert_eq!((p.as_str(), b), (part, budget))
                }
                other => panic!("{user}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_override_that_is_not_an_address_on_an_ip_part_is_refused() {
        let limit = Limit::new("uploads").part(
            Part::new("ip", Algorithm::fixed_window(2, Duration::from_secs(60)))
                .normalized(Normalize::Ip)
                .with_override("office", 100, None),
        );
        let err = Limits::builder().without_presets().single_instance(true).limit(limit).build().unwrap_err();
        assert!(err.to_string().contains("not an IP address"), "{err}");
    }
}
