//! The earlier contract: an app's `RateLimitStore` keeps serving `sign-in` and
//! `api`; every other limit counts in the limit store (memory by default).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use limit_store::error::{BoxError, Unavailable};
use limit_store::limits::RateLimitStore;
use limit_store::{LimitError, Limits, Millis};

const T0: Millis = 1_700_000_000_000;

/// A counter per key, as apps implemented the earlier contract, on a clock of
/// its own; it records every call.
#[derive(Default)]
struct AppStore {
    counts: Mutex<HashMap<String, (u64, Millis)>>,
    calls: Mutex<Vec<String>>,
    failing: bool,
    hanging: bool,
}

#[async_trait::async_trait]
impl RateLimitStore for AppStore {
    async fn increment(&self, key: &str, window: Duration) -> Result<(u64, Millis), BoxError> {
        self.calls.lock().unwrap().push(format!("increment {key} {}", window.as_secs()));
        if self.hanging {
            tokio::time::sleep(Duration::from_secs(3_600)).await;
        }
        if self.failing {
            return Err("connection refused".into());
        }
        let mut counts = self.counts.lock().unwrap();
        let window = Millis::try_from(window.as_millis()).unwrap();
        let entry = counts.entry(key.to_owned()).or_insert((0, T0 + window));
        entry.0 += 1;
        Ok(*entry)
    }

    async fn reset(&self, key: &str) -> Result<(), BoxError> {
        self.calls.lock().unwrap().push(format!("reset {key}"));
        self.counts.lock().unwrap().remove(key);
        Ok(())
    }
}

fn calls(store: &AppStore) -> Vec<String> {
    std::mem::take(&mut *store.calls.lock().unwrap())
}

#[tokio::test]
async fn sign_in_and_api_keep_counting_in_the_apps_store() {
    let app = Arc::new(AppStore::default());
    let limits = Limits::builder().legacy_store(app.clone()).single_instance(true).build().unwrap();
    let parts = [("account", "ada@example.com"), ("ip", "192.0.2.1")];
    for remaining in (0..5).rev() {
        let d = limits.attempt("sign-in", &parts).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
        assert_eq!(d.degraded, None);
    }
    assert_eq!(
        calls(&app)[..2],
        ["increment sign-in:account:ada@example.com 900".to_owned(), "increment sign-in:ip:192.0.2.1 900".to_owned()]
    );
    let d = limits.attempt("sign-in", &parts).await.unwrap();
    assert!(d.is_limited());
    assert_eq!(d.limited_by, Some("account"));
    assert_eq!(d.reset_at, T0 + 900_000, "the app store's window end");
    assert!(d.retry_after.is_some());

    // A success resets the account in the app's store, not the IP.
    limits.reset("sign-in", &parts).await.unwrap();
    let c = calls(&app);
    assert_eq!(c.last().unwrap(), "reset sign-in:account:ada@example.com");
    assert!(!c.iter().any(|l| l.starts_with("reset sign-in:ip")));
    assert!(limits.attempt("sign-in", &parts).await.unwrap().allowed);

    let d = limits.attempt("api", &[("client", "k")]).await.unwrap();
    assert!(d.allowed);
    assert_eq!(calls(&app).last().unwrap(), "increment api:client:k 60");
}

#[tokio::test]
async fn other_limits_count_in_memory() {
    let app = Arc::new(AppStore::default());
    let limits = Limits::builder().legacy_store(app.clone()).single_instance(true).build().unwrap();
    for _ in 0..5 {
        assert!(limits.attempt("code-verify", &[("code", "c")]).await.unwrap().allowed);
    }
    assert!(!limits.attempt("code-verify", &[("code", "c")]).await.unwrap().allowed);
    limits.reset("code-verify", &[("code", "c")]).await.unwrap();
    assert!(limits.attempt("password-reset", &[("account", "a"), ("ip", "192.0.2.2")]).await.unwrap().allowed);
    assert!(calls(&app).is_empty(), "the app's store saw none of them");
}

#[tokio::test]
async fn a_failing_app_store_is_unavailable_and_each_limit_applies_its_policy() {
    let app = Arc::new(AppStore { failing: true, ..AppStore::default() });
    let limits = Limits::builder().legacy_store(app).single_instance(true).build().unwrap();
    let d = limits.attempt("sign-in", &[("account", "a"), ("ip", "192.0.2.2")]).await.unwrap();
    assert_eq!((d.allowed, d.degraded), (false, Some(Unavailable::StoreFailed)));
    let d = limits.attempt("api", &[("client", "k")]).await.unwrap();
    assert_eq!((d.allowed, d.degraded), (true, Some(Unavailable::StoreFailed)));
    assert_eq!(limits.names().iter().map(|n| limits.counters(n).unwrap().degraded).sum::<u64>(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_app_store_is_answered_within_the_deadline() {
    let app = Arc::new(AppStore { hanging: true, ..AppStore::default() });
    let limits = Limits::builder().legacy_store(app).single_instance(true).build().unwrap();
    let started = tokio::time::Instant::now();
    let d = limits.attempt("sign-in", &[("account", "a"), ("ip", "192.0.2.2")]).await.unwrap();
    assert_eq!(d.degraded, Some(Unavailable::Timeout));
    assert!(!d.allowed);
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn calls_past_the_in_flight_cap_are_answered_at_once() {
    let app = Arc::new(AppStore { hanging: true, ..AppStore::default() });
    let limits = Limits::builder().legacy_store(app.clone()).max_in_flight(1).single_instance(true).build().unwrap();
    let d = limits.attempt("api", &[("client", "k")]).await.unwrap();
    assert_eq!(d.degraded, Some(Unavailable::Timeout));
    // The call that timed out keeps its place until it really ends.
    let started = tokio::time::Instant::now();
    let d = limits.attempt("api", &[("client", "k")]).await.unwrap();
    assert_eq!((d.allowed, d.degraded), (true, Some(Unavailable::Overloaded)));
    let reset = limits.reset("sign-in", &[("account", "a")]).await;
    assert!(matches!(reset, Err(LimitError::Store(_))), "{reset:?}");
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(calls(&app), ["increment api:client:k 60"]);
}

#[tokio::test]
async fn a_cost_other_than_one_is_refused_and_counts_nothing() {
    let app = Arc::new(AppStore::default());
    let limits = Limits::builder().legacy_store(app.clone()).single_instance(true).build().unwrap();
    for cost in [0, 2, 50] {
        let refused = limits.attempt_cost("api", &[("client", "k")], cost).await;
        assert!(matches!(refused, Err(LimitError::CostNotCounted { cost: c, .. }) if c == cost), "{refused:?}");
        let api = limits.handle("api").unwrap();
        assert_eq!(api.attempt_now(&[("client", "k")], cost).map(|r| r.is_err()), None, "no answer at once");
    }
    assert!(calls(&app).is_empty());
    // A limit of the limit store takes any cost.
    let d = limits.attempt_cost("code-sent", &[("destination", "d")], 0).await.unwrap();
    assert!(d.allowed);
    assert_eq!(limits.attempt("api", &[("client", "k")]).await.unwrap().remaining, 599);
}

#[tokio::test]
async fn a_value_with_a_budget_of_its_own_counts_by_it_in_the_apps_store() {
    let app = Arc::new(AppStore::default());
    let limits = Limits::builder()
        .legacy_store(app.clone())
        .value_override("api", "client", "vip", 2, Some(Duration::from_secs(10)))
        .single_instance(true)
        .build()
        .unwrap();
    for allowed in [true, true, false] {
        let d = limits.attempt("api", &[("client", "vip")]).await.unwrap();
        assert_eq!((d.allowed, d.budget), (allowed, 2));
    }
    assert_eq!(calls(&app), ["increment api:client:vip 10"; 3]);
    assert_eq!(limits.attempt("api", &[("client", "other")]).await.unwrap().remaining, 599);
}

#[tokio::test]
async fn the_apps_store_is_asked_for_the_keys_the_limit_store_counts() {
    use limit_store::{LimitStore, MemoryStore};
    let long = format!("{}@example.com", "A".repeat(limit_store::MAX_KEY_BYTES));
    for (limit, parts) in [
        ("api", vec![("client", "k-1".to_owned())]),
        ("api", vec![("client", long.clone())]),
        ("sign-in", vec![("account", format!(" {long}")), ("ip", "::ffff:192.0.2.9".to_owned())]),
    ] {
        let parts: Vec<(&str, &str)> = parts.iter().map(|(p, v)| (*p, v.as_str())).collect();
        let app = Arc::new(AppStore::default());
        let limits = Limits::builder().legacy_store(app.clone()).single_instance(true).build().unwrap();
        assert!(limits.attempt(limit, &parts).await.unwrap().allowed);
        let asked: Vec<String> = calls(&app).iter().map(|c| c.split(' ').nth(1).unwrap().to_owned()).collect();
        assert_eq!(asked.len(), parts.len());
        let memory = Arc::new(MemoryStore::new());
        let limits = Limits::builder().store(memory.clone()).single_instance(true).build().unwrap();
        assert!(limits.attempt(limit, &parts).await.unwrap().allowed);
        let keys: Vec<&str> = asked.iter().map(String::as_str).collect();
        let found = memory.read(&keys).await.unwrap();
        assert!(found.iter().all(Option::is_some), "{limit}: {asked:?} not all in the limit store");
        assert_eq!(asked.iter().filter(|k| k.contains('#')).count(), usize::from(parts[0].1.len() > 1000), "{asked:?}");
    }
}
