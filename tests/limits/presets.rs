//! What the limits tests share: the presets' scenarios that hold on any store
//! (no clock moves: a database store runs on the database's clock), and the
//! concurrency check.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use limit_store::{Decision, Limits};

pub const MINUTE: Duration = Duration::from_secs(60);

pub async fn attempt(limits: &Limits, name: &str, parts: &[(&str, &str)]) -> Decision {
    let d = limits.attempt(name, parts).await.expect("attempt");
    assert_eq!(d.degraded, None, "the store answered");
    d
}

/// Asserts a limited answer from `part`, waiting more than `min` and at most `max`.
pub fn assert_limited(d: &Decision, part: &str, min: Duration, max: Duration) {
    assert!(!d.allowed, "expected limited, got {d:?}");
    assert!(d.is_limited());
    assert_eq!(d.limited_by, Some(part));
    assert_eq!(d.remaining, 0);
    let wait = d.retry_after.expect("a limited answer says when to retry");
    assert!(wait > min && wait <= max, "retry after {wait:?}");
    let until_reset = u64::try_from(d.reset_at - d.now).unwrap();
    assert!(until_reset >= u64::try_from(wait.as_millis()).unwrap());
}

/// sign-in: 5 per account, then locked; a success (reset) unlocks the
/// account; another account is not touched.
pub async fn sign_in_account(limits: &Limits) {
    let account = "ada@example.com";
    for (i, remaining) in [4, 3, 2, 1, 0].into_iter().enumerate() {
        let ip = format!("192.0.2.{i}");
        let d = attempt(limits, "sign-in", &[("account", account), ("ip", &ip)]).await;
        assert!(d.allowed, "attempt {} of 5", i + 1);
        assert_eq!(d.remaining, remaining);
        assert_eq!(d.budget, 5);
    }
    // The order of parts doesn't matter.
    let d = attempt(limits, "sign-in", &[("ip", "198.51.100.1"), ("account", account)]).await;
    assert_limited(&d, "account", 14 * MINUTE, 15 * MINUTE);
    let other = attempt(limits, "sign-in", &[("account", "bob@example.com"), ("ip", "192.0.2.1")]).await;
    assert!(other.allowed);
    limits.reset("sign-in", &[("account", account)]).await.expect("reset");
    let d = attempt(limits, "sign-in", &[("account", account), ("ip", "192.0.2.1")]).await;
    assert!(d.allowed, "reset unlocks the account");
    assert_eq!(d.remaining, 4);
}

/// sign-in: 50 per IP across accounts; a successful sign-in does not clear the IP.
pub async fn sign_in_ip(limits: &Limits) {
    let ip = "203.0.113.9";
    for i in 0..50 {
        let account = format!("user{i}@example.com");
        let d = attempt(limits, "sign-in", &[("account", &account), ("ip", ip)]).await;
        assert!(d.allowed, "attempt {i} from the IP");
        assert_eq!(d.remaining, (49 - i).min(4));
    }
    let d = attempt(limits, "sign-in", &[("account", "last@example.com"), ("ip", ip)]).await;
    assert_limited(&d, "ip", 14 * MINUTE, 15 * MINUTE);
    limits.reset("sign-in", &[("account", "user0@example.com"), ("ip", ip)]).await.expect("reset");
    let d = attempt(limits, "sign-in", &[("account", "user0@example.com"), ("ip", ip)]).await;
    assert!(!d.allowed, "the IP keeps counting after a success");
}

/// password-reset: 3 per account an hour, 20 per IP an hour.
pub async fn password_reset(limits: &Limits) {
    for _ in 0..3 {
        let d = attempt(limits, "password-reset", &[("account", "ada"), ("ip", "192.0.2.1")]).await;
        assert!(d.allowed);
    }
    let d = attempt(limits, "password-reset", &[("account", "ada"), ("ip", "192.0.2.2")]).await;
    assert_limited(&d, "account", 59 * MINUTE, 60 * MINUTE);
    for i in 0..17 {
        let account = format!("user{i}");
        assert!(attempt(limits, "password-reset", &[("account", &account), ("ip", "192.0.2.1")]).await.allowed);
    }
    // 3 + 17 = 20 from the IP (the refused one came from another IP).
    let d = attempt(limits, "password-reset", &[("account", "zed"), ("ip", "192.0.2.1")]).await;
    assert_limited(&d, "ip", 59 * MINUTE, 60 * MINUTE);
}

/// code-sent: the second send within a minute waits for the cooldown, with
/// the budget untouched.
pub async fn code_sent_cooldown(limits: &Limits) {
    let to = [("destination", "+15550100")];
    let d = attempt(limits, "code-sent", &to).await;
    assert!(d.allowed);
    assert_eq!(d.remaining, 4);
    let d = attempt(limits, "code-sent", &to).await;
    assert!(!d.allowed);
    assert_eq!(d.limited_by, Some("destination"));
    assert_eq!(d.remaining, 4, "a cooldown refusal leaves the budget");
    let wait = d.retry_after.unwrap();
    assert!(wait > Duration::from_secs(50) && wait <= MINUTE, "{wait:?}");
    assert!(attempt(limits, "code-sent", &[("destination", "+15550101")]).await.allowed);
}

/// code-verify: 5 guesses per code; the right code (reset) clears it.
pub async fn code_verify(limits: &Limits) {
    let code = [("code", "challenge-7f3a")];
    for remaining in (0..5).rev() {
        let d = attempt(limits, "code-verify", &code).await;
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
    }
    let d = attempt(limits, "code-verify", &code).await;
    assert_limited(&d, "code", 14 * MINUTE, 15 * MINUTE);
    limits.reset("code-verify", &code).await.unwrap();
    assert!(attempt(limits, "code-verify", &code).await.allowed);
}

/// api with a budget of 5 per hour (set by the caller, so the refill can't
/// be seen on a real clock): exactly 5, then a wait of one refill.
pub async fn api_small_budget(limits: &Limits) {
    let client = [("client", "key-1")];
    for remaining in (0..5).rev() {
        let d = attempt(limits, "api", &client).await;
        assert!(d.allowed);
        assert_eq!(d.remaining, remaining);
    }
    let d = attempt(limits, "api", &client).await;
    assert_limited(&d, "client", 11 * MINUTE, 12 * MINUTE);
}

/// `tasks` tasks each make one sign-in on one account, from distinct IPs, at
/// once: exactly 5 are allowed.
pub async fn sign_in_exact_under_concurrency(limits: &Limits, tasks: usize) {
    let limits = Arc::new(limits.clone());
    let handles: Vec<_> = (0..tasks)
        .map(|i| {
            let limits = limits.clone();
            tokio::spawn(async move {
                let ip = format!("10.0.{}.{}", i / 256, i % 256);
                limits.attempt("sign-in", &[("account", "target@example.com"), ("ip", &ip)]).await.expect("attempt")
            })
        })
        .collect();
    let mut allowed = 0;
    for h in handles {
        let d = h.await.unwrap();
        assert_eq!(d.degraded, None, "every attempt reached the store");
        allowed += usize::from(d.allowed);
    }
    assert_eq!(allowed, 5, "the account's budget held exactly");
    let counters = limits.counters("sign-in").unwrap();
    assert_eq!(counters.allowed, 5);
    assert_eq!(counters.limited, u64::try_from(tasks - 5).unwrap());
}
