//! Every preset on the memory store, on a manual clock: the budgets, the
//! windows and locks running out, exactness under concurrency, and the errors
//! a wrong call gets.

use std::sync::Arc;
use std::time::Duration;

use crate::presets::*;
use limit_store::clock::ManualClock;
use limit_store::error::RefusedInput;
use limit_store::{in_transaction, LimitError, LimitStore, Limits, MemoryStore};

const T0: i64 = 1_700_000_000_000;

fn limits_on(clock: &ManualClock) -> Limits {
    Limits::builder()
        .store(Arc::new(MemoryStore::with_clock(100_000, Arc::new(clock.clone()))))
        .single_instance(true)
        .build()
        .expect("build")
}

fn small_api(clock: &ManualClock) -> Limits {
    Limits::builder()
        .store(Arc::new(MemoryStore::with_clock(100_000, Arc::new(clock.clone()))))
        .single_instance(true)
        .budget("api", "client", 5)
        .window("api", "client", 60 * MINUTE)
        .build()
        .expect("build")
}

#[tokio::test]
async fn sign_in_per_account() {
    sign_in_account(&limits_on(&ManualClock::new(T0))).await;
}

#[tokio::test]
async fn sign_in_per_ip() {
    sign_in_ip(&limits_on(&ManualClock::new(T0))).await;
}

#[tokio::test]
async fn sign_in_lock_ends_on_time_and_refusals_do_not_lengthen_it() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    let parts = [("account", "ada@example.com"), ("ip", "192.0.2.1")];
    for _ in 0..4 {
        assert!(attempt(&limits, "sign-in", &parts).await.allowed);
    }
    // The fifth failure, 5 minutes in, locks the account for 15 minutes from then.
    clock.advance(5 * MINUTE);
    assert!(attempt(&limits, "sign-in", &parts).await.allowed);
    for _ in 0..10 {
        clock.advance(MINUTE);
        assert!(!attempt(&limits, "sign-in", &parts).await.allowed);
    }
    clock.set(T0 + 20 * 60_000 - 1);
    let d = attempt(&limits, "sign-in", &parts).await;
    assert_eq!(d.retry_after, Some(Duration::from_millis(1)));
    clock.set(T0 + 20 * 60_000);
    let d = attempt(&limits, "sign-in", &parts).await;
    assert!(d.allowed, "the lock is over");
    assert_eq!(d.remaining, 4);
}

#[tokio::test]
async fn sign_in_ip_window_slides() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    let ip = "203.0.113.9";
    // 25 attempts at the start, 25 seven minutes later: the IP is spent.
    for i in 0..50 {
        if i == 25 {
            clock.advance(7 * MINUTE);
        }
        let account = format!("u{i}");
        assert!(attempt(&limits, "sign-in", &[("account", &account), ("ip", ip)]).await.allowed);
    }
    let d = attempt(&limits, "sign-in", &[("account", "x"), ("ip", ip)]).await;
    assert_eq!(d.retry_after, Some(8 * MINUTE));
    // Once the first 25 leave the window, 25 more fit, and no more.
    clock.set(T0 + 15 * 60_000);
    for i in 0..25 {
        let account = format!("v{i}");
        assert!(attempt(&limits, "sign-in", &[("account", &account), ("ip", ip)]).await.allowed);
    }
    assert!(!attempt(&limits, "sign-in", &[("account", "y"), ("ip", ip)]).await.allowed);
}

#[tokio::test]
async fn password_reset_budgets() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    password_reset(&limits).await;
    clock.advance(60 * MINUTE);
    assert!(attempt(&limits, "password-reset", &[("account", "ada"), ("ip", "192.0.2.1")]).await.allowed, "a new hour");
}

#[tokio::test]
async fn code_sent_cooldown_and_hourly_budget() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    code_sent_cooldown(&limits).await;
    let to = [("destination", "+15550100")];
    clock.advance(MINUTE - Duration::from_millis(1));
    assert!(!attempt(&limits, "code-sent", &to).await.allowed);
    clock.advance(Duration::from_millis(1));
    assert!(attempt(&limits, "code-sent", &to).await.allowed, "the cooldown is over");
    for _ in 0..3 {
        clock.advance(MINUTE);
        assert!(attempt(&limits, "code-sent", &to).await.allowed);
    }
    clock.advance(MINUTE);
    let d = attempt(&limits, "code-sent", &to).await;
    assert_limited(&d, "destination", 54 * MINUTE, 55 * MINUTE);
    clock.set(T0 + 3_600_000);
    assert!(attempt(&limits, "code-sent", &to).await.allowed, "a new hour");
}

#[tokio::test]
async fn code_verify_guesses() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    code_verify(&limits).await;
    let code = [("code", "challenge-b")];
    for _ in 0..5 {
        attempt(&limits, "code-verify", &code).await;
    }
    clock.advance(15 * MINUTE);
    assert!(attempt(&limits, "code-verify", &code).await.allowed);
}

#[tokio::test]
async fn api_burst_then_steady_refill() {
    let clock = ManualClock::new(T0);
    let limits = limits_on(&clock);
    let client = [("client", "key-1")];
    for _ in 0..600 {
        assert!(attempt(&limits, "api", &client).await.allowed);
    }
    let d = attempt(&limits, "api", &client).await;
    assert_limited(&d, "client", Duration::ZERO, Duration::from_millis(100));
    clock.advance(Duration::from_millis(100));
    assert!(attempt(&limits, "api", &client).await.allowed);
    assert!(!attempt(&limits, "api", &client).await.allowed);
    api_small_budget(&small_api(&clock)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_exact_with_many_tasks_on_one_account() {
    let limits = limits_on(&ManualClock::new(T0));
    sign_in_exact_under_concurrency(&limits, 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_exact_with_many_tasks_on_one_client() {
    let limits = Arc::new(limits_on(&ManualClock::new(T0)));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let limits = limits.clone();
            tokio::spawn(async move {
                let mut allowed = 0u64;
                for _ in 0..20 {
                    let d = limits.attempt("api", &[("client", "k")]).await.unwrap();
                    allowed += u64::from(d.allowed);
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for t in tasks {
        allowed += t.await.unwrap();
    }
    assert_eq!(allowed, 600, "1000 attempts on a frozen clock: exactly the burst");
}

#[tokio::test]
async fn long_values_are_counted_apart() {
    let limits = limits_on(&ManualClock::new(T0));
    let a = format!("{}a@example.com", "x".repeat(2_000));
    let b = format!("{}b@example.com", "x".repeat(2_000));
    for _ in 0..5 {
        assert!(attempt(&limits, "code-verify", &[("code", &a)]).await.allowed);
    }
    assert!(!attempt(&limits, "code-verify", &[("code", &a)]).await.allowed);
    assert!(attempt(&limits, "code-verify", &[("code", &b)]).await.allowed);
    assert!(attempt(&limits, "code-verify", &[("code", "é😀 \u{0}")]).await.allowed);
}

#[tokio::test]
async fn wrong_calls_say_what_the_limit_takes() {
    let limits = limits_on(&ManualClock::new(T0));
    let err = limits.attempt("sign_in", &[("account", "a")]).await.unwrap_err();
    assert!(matches!(err, LimitError::UnknownLimit { .. }), "{err}");
    assert!(err.to_string().contains("sign-in"), "{err}");

    let err = limits.attempt("sign-in", &[("account", "a")]).await.unwrap_err();
    assert!(matches!(&err, LimitError::MissingPart { part, .. } if part == "ip"), "{err}");
    assert!(err.to_string().contains("account, ip"), "{err}");

    let err = limits.attempt("sign-in", &[("account", "a"), ("ip", "192.0.2.2"), ("email", "c")]).await.unwrap_err();
    assert!(matches!(&err, LimitError::UnknownPart { part, .. } if part == "email"), "{err}");
    assert!(err.to_string().contains("account, ip"), "{err}");

    let err = limits.attempt("sign-in", &[("account", "a"), ("account", "b"), ("ip", "192.0.2.3")]).await.unwrap_err();
    assert!(matches!(err, LimitError::DuplicatePart { .. }), "{err}");

    // A reset needs the parts it clears; sign-in's IP is kept, so it may be left out.
    let err = limits.reset("sign-in", &[("ip", "192.0.2.2")]).await.unwrap_err();
    assert!(matches!(&err, LimitError::MissingPart { part, .. } if part == "account"), "{err}");
    // None of this counted anything.
    assert_eq!(limits.counters("sign-in").unwrap().allowed, 0);
}

#[tokio::test]
async fn limits_are_refused_inside_the_apps_transaction() {
    let limits = limits_on(&ManualClock::new(T0));
    let parts = [("account", "a"), ("ip", "192.0.2.2")];
    let err = in_transaction(limits.attempt("sign-in", &parts)).await.unwrap_err();
    assert!(matches!(&err, LimitError::Store(limit_store::StoreError::Refused(RefusedInput::InTransaction))), "{err}");
    let err = in_transaction(limits.reset("sign-in", &parts)).await.unwrap_err();
    assert!(matches!(err, LimitError::Store(_)));
    assert!(limits.attempt("sign-in", &parts).await.unwrap().allowed);
}

#[tokio::test]
async fn bad_definitions_are_refused_at_build() {
    let err = Limits::builder().budget("sign-in", "account", 0).build().unwrap_err();
    assert!(matches!(&err, LimitError::Invalid { limit, .. } if limit == "sign-in"), "{err}");
    let err = Limits::builder().budget("sign-in", "ip", 1_000).build().unwrap_err();
    assert!(err.to_string().contains("256"), "{err}");
    let err = Limits::builder().budget("nope", "account", 1).build().unwrap_err();
    assert!(matches!(err, LimitError::UnknownLimit { .. }));
    let err = Limits::builder().window("api", "ip", MINUTE).build().unwrap_err();
    assert!(matches!(err, LimitError::UnknownPart { .. }));
}

#[tokio::test]
async fn an_apps_own_limit() {
    use limit_store::limits::{Algorithm, Part};
    use limit_store::{Limit, Policy};
    let clock = ManualClock::new(T0);
    let limits = Limits::builder()
        .store(Arc::new(MemoryStore::with_clock(1_000, Arc::new(clock.clone()))))
        .single_instance(true)
        .limit(
            Limit::new("comment")
                .part(Part::new("user", Algorithm::sliding_window(2, MINUTE)))
                .part(Part::new("thread", Algorithm::fixed_window(3, MINUTE)))
                .policy(Policy::Allow),
        )
        .build()
        .unwrap();
    assert!(limits.names().contains(&"comment".to_owned()));
    let post = |user: &'static str| [("user", user), ("thread", "t1")];
    assert!(attempt(&limits, "comment", &post("a")).await.allowed);
    assert!(attempt(&limits, "comment", &post("a")).await.allowed);
    let d = attempt(&limits, "comment", &post("a")).await;
    assert_eq!(d.limited_by, Some("user"));
    // The refused attempt was not counted on the thread: one more user fits.
    assert!(attempt(&limits, "comment", &post("b")).await.allowed);
    let d = attempt(&limits, "comment", &post("c")).await;
    assert_eq!(d.limited_by, Some("thread"));
}

/// A one-part limit on a full memory store (the path that counts without a
/// list of writes or key text): a new key is answered by the limit's policy
/// and written nowhere, keys already held go on counting and are reset, and
/// a freed place is taken.
#[tokio::test]
async fn a_full_memory_store_answers_new_keys_by_policy_and_keeps_counting_the_held_ones() {
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(2, Arc::new(clock.clone())));
    let limits = Limits::builder()
        .store(store.clone())
        .single_instance(true)
        .budget("api", "client", 3)
        .window("api", "client", MINUTE)
        .build()
        .expect("build");
    for client in ["a", "b"] {
        assert!(limits.attempt("api", &[("client", client)]).await.unwrap().allowed);
    }
    let refused = limits.attempt("api", &[("client", "c")]).await.unwrap();
    assert_eq!(refused.degraded, Some(limit_store::error::Unavailable::Full));
    assert!(refused.allowed, "api's policy allows");
    assert_eq!(store.stats().unwrap().held, 2, "the third key was not written");
    let held = limits.attempt("api", &[("client", "a")]).await.unwrap();
    assert_eq!((held.allowed, held.remaining, held.degraded), (true, 1, None), "a held key counts on");
    // A reset finds the key a count wrote: the two name it alike.
    limits.reset("api", &[("client", "a")]).await.unwrap();
    assert_eq!(store.stats().unwrap().held, 1);
    assert_eq!(limits.attempt("api", &[("client", "a")]).await.unwrap().remaining, 2);
    clock.advance(MINUTE + Duration::from_millis(1));
    let fresh = limits.attempt("api", &[("client", "c")]).await.unwrap();
    assert_eq!((fresh.degraded, fresh.remaining), (None, 2), "expired entries made room");
}
