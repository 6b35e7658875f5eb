//! The example app (`examples/axum_app.rs`) served on a real socket: its
//! sign-in flow (5 wrong passwords, then 429, then after the lock the right
//! password works and clears the failures), codes sent, and its API.

#[path = "../../examples/axum_app.rs"]
#[allow(dead_code)]
mod example;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::common::http::{request, Reply};
use limit_store::limits::{Algorithm, Normalize, Part};
use limit_store::{Limit, Limits, MemoryStore};

/// Serves the example's app with a sign-in that locks for 2 s after 5 failures.
async fn serve() -> String {
    let sign_in = Limit::new("sign-in")
        .part(
            Part::new("account", Algorithm::lockout(5, Duration::from_secs(2), Duration::from_secs(2)))
                .normalized(Normalize::Folded),
        )
        .part(
            Part::new("ip", Algorithm::sliding_window(50, Duration::from_secs(900)))
                .kept_on_reset()
                .normalized(Normalize::Ip),
        );
    let limits =
        Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).limit(sign_in).build().unwrap();
    let app = example::app(limits).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await.unwrap();
    });
    addr
}

async fn post(addr: &str, path: &str, body: &str) -> Reply {
    request(addr, "POST", path, &[("content-type", "application/json")], body.as_bytes()).await.unwrap()
}

/// `r` of the RateLimit field.
fn remaining(reply: &Reply) -> i64 {
    let value = reply.header("ratelimit").unwrap_or_else(|| panic!("no RateLimit field: {reply:?}"));
    let list = sfv::Parser::parse_list(value.as_bytes()).unwrap();
    let sfv::ListEntry::Item(item) = &list[0] else { panic!("{value}") };
    match item.params.get("r") {
        Some(sfv::BareItem::Integer(r)) => *r,
        other => panic!("{value}: r is {other:?}"),
    }
}

const WRONG: &str = r#"{"account": "Ada@Example.com", "password": "guess"}"#;
const RIGHT: &str = r#"{"account": "ada@example.com", "password": "correct horse battery staple"}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_locks_after_five_failures_and_the_right_password_clears_them() {
    let addr = serve().await;
    for left in (0..5).rev() {
        let r = post(&addr, "/sign-in", WRONG).await;
        assert_eq!(r.status, 401, "{}", r.body);
        assert_eq!(remaining(&r), left);
    }
    // Locked: even the right password is refused until the lock ends.
    let r = post(&addr, "/sign-in", RIGHT).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "{wait}");
    assert_eq!(r.json()["kind"], "limited");
    tokio::time::sleep(Duration::from_millis(wait * 1_000 + 100)).await;

    let r = post(&addr, "/sign-in", RIGHT).await;
    assert_eq!((r.status, r.body.as_str()), (200, "signed in"));
    // The success cleared the account's failures: a full budget again.
    let r = post(&addr, "/sign-in", WRONG).await;
    assert_eq!(r.status, 401);
    assert_eq!(remaining(&r), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codes_resets_and_the_api_are_limited() {
    let addr = serve().await;
    // A second code to one phone within the minute's cooldown is refused.
    assert_eq!(post(&addr, "/send-code", r#"{"phone": "+15550100"}"#).await.status, 202);
    let r = post(&addr, "/send-code", r#"{"phone": "+15550100"}"#).await;
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some());
    assert_eq!(post(&addr, "/send-code", r#"{"phone": "+15550101"}"#).await.status, 202);

    for _ in 0..3 {
        assert_eq!(post(&addr, "/password-reset", r#"{"account": "ada@example.com"}"#).await.status, 202);
    }
    assert_eq!(post(&addr, "/password-reset", r#"{"account": "ada@example.com"}"#).await.status, 429);

    let r = request(&addr, "GET", "/api/items", &[], b"").await.unwrap();
    assert_eq!(r.status, 401);
    assert!(r.body.contains("X-Api-Key header"), "{}", r.body);
    let r = request(&addr, "GET", "/api/items", &[("x-api-key", "k1")], b"").await.unwrap();
    assert_eq!((r.status, r.body.as_str()), (200, r#"["apple","pear"]"#));
    assert_eq!(remaining(&r), 599);
}
