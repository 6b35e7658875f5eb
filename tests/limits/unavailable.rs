//! A store that can't answer: each preset answers by its policy, the answer
//! says it was degraded (never "limited"), and it is logged and counted. And
//! shadow mode: counted and logged, never refused.

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::ManualClock;
use limit_store::error::Unavailable;
use limit_store::limits::presets;
use limit_store::{Apply, Entry, LimitError, LimitStore, Limits, MemoryStore, Policy, StoreError};

/// Answers every call unavailable, or refused, or never.
struct Broken(&'static str);

#[async_trait::async_trait]
impl LimitStore for Broken {
    fn shared(&self) -> bool {
        true
    }
    async fn update(&self, _: &[&str], _: &mut Apply<'_>) -> Result<(), StoreError> {
        match self.0 {
            "down" => Err(StoreError::unavailable(Unavailable::StoreFailed, "down for the test")),
            "refuses" => Err(StoreError::from(limit_store::error::RefusedInput::NoKeys)),
            _ => {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                Ok(())
            }
        }
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        Ok(vec![None; keys.len()])
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

fn on(store: &'static str) -> Limits {
    Limits::builder().store(Arc::new(Broken(store))).build().unwrap()
}

/// A preset, the parts of one attempt, and whether it allows when unavailable.
type Case = (&'static str, &'static [(&'static str, &'static str)], bool);

const EVERY_PRESET: [Case; 5] = [
    ("sign-in", &[("account", "a"), ("ip", "192.0.2.2")], false),
    ("password-reset", &[("account", "a"), ("ip", "192.0.2.2")], true),
    ("code-sent", &[("destination", "a")], false),
    ("code-verify", &[("code", "a")], false),
    ("api", &[("client", "a")], true),
];

#[tokio::test]
async fn each_preset_answers_by_its_policy_and_says_so() {
    let logs = crate::common::capture_logs();
    let limits = on("down");
    for (name, parts, allows) in EVERY_PRESET {
        let d = limits.attempt(name, parts).await.expect("degraded is an answer, not an error");
        assert_eq!(d.allowed, allows, "{name}");
        assert_eq!(d.degraded, Some(Unavailable::StoreFailed), "{name}");
        assert!(!d.is_limited(), "{name}: unavailable is not limited");
        assert_eq!(d.retry_after, None, "{name}");
        assert_eq!(d.limited_by, None, "{name}");
        let c = limits.counters(name).unwrap();
        assert_eq!((c.degraded, c.limited, c.allowed), (1, 0, 0), "{name}");
    }
    assert_eq!(limits.names().iter().map(|n| limits.counters(n).unwrap().degraded).sum::<u64>(), 5);
    let lines = logs.lines_of_kind("limit-degraded");
    assert_eq!(lines.len(), 5, "one line per limit: {lines:?}");
    assert!(lines.iter().any(|l| l.contains("limit=sign-in") && l.contains("policy=\"deny\"")), "{lines:?}");
    // Throttled: more of the same write no more lines.
    for _ in 0..10 {
        limits.attempt("api", &[("client", "a")]).await.unwrap();
    }
    assert_eq!(logs.lines_of_kind("limit-degraded").len(), 5);
    assert_eq!(limits.counters("api").unwrap().degraded, 11);
}

#[tokio::test]
async fn a_policy_can_be_changed() {
    let limits = Limits::builder()
        .store(Arc::new(Broken("down")))
        .limit(presets::named("sign-in").unwrap().policy(Policy::Allow))
        .limit(presets::named("api").unwrap().policy(Policy::Deny))
        .build()
        .unwrap();
    let d = limits.attempt("sign-in", &[("account", "a"), ("ip", "192.0.2.2")]).await.unwrap();
    assert!(d.allowed && d.degraded.is_some());
    let d = limits.attempt("api", &[("client", "a")]).await.unwrap();
    assert!(!d.allowed && d.degraded.is_some());
    assert_eq!(limits.limit("api").unwrap().unavailable_policy(), Policy::Deny);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_never_answers_is_cut_off_by_the_guard() {
    // The clock is tokio's paused clock: the 2 s deadline passes without waiting.
    let limits = on("hangs");
    let d = limits.attempt("sign-in", &[("account", "a"), ("ip", "192.0.2.2")]).await.unwrap();
    assert_eq!(d.degraded, Some(Unavailable::Timeout));
    assert!(!d.allowed);
    let d = limits.attempt("api", &[("client", "a")]).await.unwrap();
    assert_eq!(d.degraded, Some(Unavailable::Timeout));
    assert!(d.allowed);
}

#[tokio::test]
async fn a_refusal_is_an_error_not_a_policy() {
    let limits = on("refuses");
    let err = limits.attempt("api", &[("client", "a")]).await.unwrap_err();
    assert!(matches!(err, LimitError::Store(limit_store::StoreError::Refused(_))), "{err}");
    assert_eq!(limits.names().iter().map(|n| limits.counters(n).unwrap().degraded).sum::<u64>(), 0);
}

#[tokio::test]
async fn a_reset_on_a_down_store_is_an_error() {
    let limits = on("down");
    let err = limits.reset("code-verify", &[("code", "a")]).await.unwrap_err();
    assert!(matches!(err, LimitError::Store(limit_store::StoreError::Unavailable { .. })), "{err}");
}

#[tokio::test]
async fn shadow_mode_counts_and_logs_but_refuses_nothing() {
    let logs = crate::common::capture_logs();
    let clock = ManualClock::new(1_700_000_000_000);
    let limits = Limits::builder()
        .store(Arc::new(MemoryStore::with_clock(1_000, Arc::new(clock))))
        .single_instance(true)
        .limit(presets::named("code-verify").unwrap().shadow(true))
        .build()
        .unwrap();
    let code = [("code", "c1")];
    for _ in 0..5 {
        let d = limits.attempt("code-verify", &code).await.unwrap();
        assert!(d.allowed && !d.shadow_refused);
    }
    for _ in 0..3 {
        let d = limits.attempt("code-verify", &code).await.unwrap();
        assert!(d.allowed, "shadow mode refuses nothing");
        assert!(d.shadow_refused);
        assert!(!d.is_limited());
        assert_eq!(d.limited_by, Some("code"));
        assert_eq!(d.retry_after, None);
    }
    let check = limits.attempt_cost("code-verify", &code, 0).await.unwrap();
    assert!(check.allowed && check.shadow_refused, "a check says what shadow mode would refuse");
    let c = limits.counters("code-verify").unwrap();
    assert_eq!((c.allowed, c.shadow_refused, c.limited), (5, 3, 0), "and is in no tally");
    let lines = logs.lines_of_kind("limit-shadow-refusal");
    assert_eq!(lines.len(), 1, "throttled: {lines:?}");
    assert!(lines[0].contains("limit=code-verify") && lines[0].contains("part=code"));
    // Other limits still refuse.
    let parts = [("account", "a"), ("ip", "192.0.2.2")];
    for _ in 0..5 {
        limits.attempt("sign-in", &parts).await.unwrap();
    }
    assert!(!limits.attempt("sign-in", &parts).await.unwrap().allowed);
}

#[tokio::test]
async fn a_memory_store_without_single_instance_warns_at_startup() {
    let logs = crate::common::capture_logs();
    let _ = Limits::builder().build().unwrap();
    assert_eq!(logs.lines_of_kind("limit-store-not-shared").len(), 1);
    let _ = Limits::builder().single_instance(true).build().unwrap();
    assert_eq!(logs.lines_of_kind("limit-store-not-shared").len(), 1);
}
