//! `Limits::attempt_cost` on every store (memory, SQLite, PostgreSQL,
//! MariaDB, Redis), through every path a count takes there (the memory
//! store's typed one-part paths, its guarded path for several parts, the
//! databases' and Redis's updates): a cost is allowed only when all of it
//! fits on every part; cost 0 counts nothing; a refused cost spends no other
//! part's budget; a cost over a budget is refused as `CostOverBudget`,
//! counting nothing; every answer says what each part has left.

use std::sync::Arc;
use std::time::Duration;

use limit_store::error::BoxError;
use limit_store::limits::{Algorithm, Part, RateLimitStore};
use limit_store::{DatabaseStore, Decision, Limit, LimitError, LimitStore, Limits, MemoryStore, RedisStore};

const HOUR: Duration = Duration::from_secs(3_600);

/// One-part limits, one per algorithm, budget 5 an hour; and `upload`, a
/// fixed window of 5 per account beside a GCRA of 10 per IP.
fn limits_on(store: Arc<dyn LimitStore>, single: bool) -> Limits {
    let one = |name: &str, algorithm: Algorithm| Limit::new(name).part(Part::new("k", algorithm));
    Limits::builder()
        .store(store)
        .single_instance(single)
        .without_presets()
        .limit(one("fixed", Algorithm::fixed_window(5, HOUR)))
        .limit(one("sliding", Algorithm::sliding_window(5, HOUR)))
        .limit(one("lockout", Algorithm::lockout(5, HOUR, HOUR)))
        .limit(one("gcra", Algorithm::gcra(5, HOUR)))
        .limit(
            Limit::new("upload")
                .part(Part::new("account", Algorithm::fixed_window(5, HOUR)))
                .part(Part::new("ip", Algorithm::gcra(10, HOUR))),
        )
        .build()
        .expect("build")
}

/// Every store this run reaches, each with limits of its own and a name.
async fn every_store(test: &str) -> Vec<(String, Limits)> {
    let mut all = vec![("memory".to_owned(), limits_on(Arc::new(MemoryStore::new()), true))];
    for (url, table) in crate::common::db::databases(test) {
        DatabaseStore::builder(&url).table(&table).migrate().await.expect("migrate");
        let store = DatabaseStore::builder(&url)
            .table(&table)
            .secret(crate::common::db::SECRET)
            .sweep_every(None)
            .connect()
            .await
            .expect("connect");
        let name = url.split(':').next().unwrap_or("database").to_owned();
        all.push((name, limits_on(Arc::new(store), false)));
    }
    if let Some(url) = crate::common::redis::server() {
        let prefix = format!("ls-cost-{test}-{}:", crate::common::db::rand_suffix());
        let store = RedisStore::builder(&url).secret(crate::common::redis::SECRET).prefix(&prefix).connect().await;
        all.push(("redis".to_owned(), limits_on(Arc::new(store.expect("connect")), false)));
    }
    all
}

/// A value of this run's own, so no earlier run's counts are met.
fn fresh(name: &str) -> String {
    format!("{name}-{}", crate::common::db::rand_suffix())
}

async fn cost(limits: &Limits, name: &str, parts: &[(&str, &str)], cost: u64) -> Decision {
    let d = limits.attempt_cost(name, parts, cost).await.unwrap_or_else(|e| panic!("{name} cost {cost}: {e}"));
    assert_eq!(d.degraded, None, "{name}: the store answered");
    d
}

/// Each part's `(part, budget, remaining)`.
fn left(d: &Decision) -> Vec<(&'static str, u64, u64)> {
    d.parts().iter().map(|p| (p.part, p.budget, p.remaining)).collect()
}

/// On a one-part limit of each algorithm: cost 3 of 5, a check, a refused
/// 3 that leaves the 2, an over-budget 6 that counts nothing, then the 2.
async fn one_part_costs(store: &str, limits: &Limits) {
    for name in ["fixed", "sliding", "lockout", "gcra"] {
        let value = fresh(name);
        let parts = [("k", value.as_str())];
        let at = format!("{store}/{name}");
        let d = cost(limits, name, &parts, 3).await;
        assert!(d.allowed, "{at}: {d:?}");
        assert_eq!(left(&d), vec![("k", 5, 2)], "{at}");
        let d = cost(limits, name, &parts, 0).await;
        assert!(d.allowed && d.remaining == 2, "{at}: a check counts nothing: {d:?}");
        let d = cost(limits, name, &parts, 3).await;
        assert!(d.is_limited() && d.retry_after.is_some(), "{at}: 3 don't fit in 2: {d:?}");
        assert_eq!(left(&d), vec![("k", 5, 2)], "{at}: the refusal counted nothing");
        match limits.attempt_cost(name, &parts, 6).await {
            Err(LimitError::CostOverBudget { part, cost: 6, budget: 5, .. }) => assert_eq!(part, "k", "{at}"),
            other => panic!("{at}: a cost over the budget: {other:?}"),
        }
        let d = cost(limits, name, &parts, 2).await;
        assert!(d.allowed && d.remaining == 0, "{at}: the last 2 fit: {d:?}");
        let d = cost(limits, name, &parts, 0).await;
        assert!(d.is_limited(), "{at}: a check when nothing is left is refused: {d:?}");
        let d = cost(limits, name, &parts, 1).await;
        assert!(d.is_limited(), "{at}: {d:?}");
    }
}

/// On a limit of two parts: a cost is counted on both or neither, and a
/// part that would have allowed a refused cost keeps its budget.
async fn two_part_costs(store: &str, limits: &Limits) {
    let (ip, ada, bob, cy) = (fresh("ip"), fresh("ada"), fresh("bob"), fresh("cy"));
    let with = |account: &str| [("account", account.to_owned()), ("ip", ip.clone())];
    let ada = with(&ada);
    let ada: Vec<(&str, &str)> = ada.iter().map(|(p, v)| (*p, v.as_str())).collect();
    let d = cost(limits, "upload", &ada, 3).await;
    assert!(d.allowed, "{store}: {d:?}");
    assert_eq!(left(&d), vec![("account", 5, 2), ("ip", 10, 7)], "{store}");
    let d = cost(limits, "upload", &ada, 3).await;
    assert!(d.is_limited(), "{store}: {d:?}");
    assert_eq!(d.limited_by, Some("account"));
    assert_eq!(left(&d), vec![("account", 5, 2), ("ip", 10, 7)], "{store}: the ip part kept its 7");
    let d = cost(limits, "upload", &ada, 0).await;
    assert!(d.allowed, "{store}: {d:?}");
    assert_eq!(left(&d), vec![("account", 5, 2), ("ip", 10, 7)], "{store}: a check counts nothing");
    match limits.attempt_cost("upload", &ada, 6).await {
        Err(LimitError::CostOverBudget { part, cost: 6, budget: 5, .. }) => assert_eq!(part, "account"),
        other => panic!("{store}: 6 is over the account's budget of 5: {other:?}"),
    }
    // Over both budgets: the smaller is named, the most that may be counted at once.
    match limits.attempt_cost("upload", &ada, 11).await {
        Err(LimitError::CostOverBudget { part, cost: 11, budget: 5, .. }) => assert_eq!(part, "account"),
        other => panic!("{store}: 11 is over both budgets, the account's 5 the smaller: {other:?}"),
    }
    // The refused 3 and the 6 over budget left the IP's 7: 5 more fit there.
    let bob = with(&bob);
    let bob: Vec<(&str, &str)> = bob.iter().map(|(p, v)| (*p, v.as_str())).collect();
    let d = cost(limits, "upload", &bob, 5).await;
    assert!(d.allowed, "{store}: {d:?}");
    assert_eq!(left(&d), vec![("account", 5, 0), ("ip", 10, 2)], "{store}");
    // Refused by the IP: the account of the attempt keeps its budget.
    let cy = with(&cy);
    let cy: Vec<(&str, &str)> = cy.iter().map(|(p, v)| (*p, v.as_str())).collect();
    let d = cost(limits, "upload", &cy, 3).await;
    assert!(d.is_limited(), "{store}: {d:?}");
    assert_eq!(d.limited_by, Some("ip"));
    assert_eq!(left(&d), vec![("account", 5, 5), ("ip", 10, 2)], "{store}: the account was not spent");
    let d = cost(limits, "upload", &cy, 2).await;
    assert!(d.allowed, "{store}: {d:?}");
    assert_eq!(left(&d), vec![("account", 5, 3), ("ip", 10, 0)], "{store}");
}

#[tokio::test]
async fn a_cost_counts_whole_or_not_at_all_on_one_part() {
    for (store, limits) in every_store("cost_one").await {
        one_part_costs(&store, &limits).await;
    }
}

#[tokio::test]
async fn a_cost_counts_on_every_part_or_on_none() {
    for (store, limits) in every_store("cost_two").await {
        two_part_costs(&store, &limits).await;
    }
}

/// An earlier-contract store counts one at a time: any other cost is
/// refused as such, before anything is counted.
#[tokio::test]
async fn an_earlier_contract_store_takes_only_a_cost_of_one() {
    struct Counter(std::sync::Mutex<u64>);
    #[async_trait::async_trait]
    impl RateLimitStore for Counter {
        async fn increment(&self, _: &str, _: Duration) -> Result<(u64, limit_store::Millis), BoxError> {
            let mut n = self.0.lock().unwrap();
            *n += 1;
            Ok((*n, 1_700_000_000_000))
        }
        async fn reset(&self, _: &str) -> Result<(), BoxError> {
            Ok(())
        }
    }
    let counter = Arc::new(Counter(std::sync::Mutex::new(0)));
    let limits = Limits::builder().legacy_store(counter.clone()).single_instance(true).build().unwrap();
    for n in [0, 2] {
        match limits.attempt_cost("api", &[("client", "c-1")], n).await {
            Err(LimitError::CostNotCounted { cost, .. }) => assert_eq!(cost, n),
            other => panic!("cost {n}: {other:?}"),
        }
    }
    assert_eq!(*counter.0.lock().unwrap(), 0, "nothing was counted");
    assert!(limits.attempt_cost("api", &[("client", "c-1")], 1).await.unwrap().allowed);
    assert_eq!(*counter.0.lock().unwrap(), 1);
}

/// A store that can't answer: every part is in the answer, with nothing
/// known to be left.
#[tokio::test]
async fn a_degraded_answer_names_every_part() {
    let limits = limits_on(Arc::new(MemoryStore::with_max_entries(1)), true);
    let parts = [("account", "ada"), ("ip", "192.0.2.7")];
    let d = limits.attempt_cost("upload", &parts, 2).await.unwrap();
    assert!(d.degraded.is_some(), "two keys don't fit in a store of one: {d:?}");
    assert_eq!(left(&d), vec![("account", 5, 0), ("ip", 10, 0)]);
}

/// The README's cost example, as written there, answers.
#[tokio::test]
#[rustfmt::skip]
async fn the_readme_cost_example_answers() -> Result<(), LimitError> {
    let budget = Algorithm::gcra(100_000, HOUR);
    let limits = Limits::builder()
        .store(Arc::new(MemoryStore::new()))
        .single_instance(true)
        .limit(Limit::new("llm").part(Part::new("account", budget)))
        .build()?;
    // From here to the next comment: the README's lines.
    let tokens = 1_200;
    let d = limits.attempt_cost("llm", &[("account", "ada@example.com")], tokens).await?;
    for p in d.parts() {
        println!("{}: {} of {} left", p.part, p.remaining, p.budget);
    }
    // End of the README's lines.
    assert_eq!(left(&d), vec![("account", 100_000, 98_800)]);
    Ok(())
}
