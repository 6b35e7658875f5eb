//! `limit-store serve` over a real socket: decisions with their RateLimit
//! fields, resets, the list of limits, health, bad input as 4xx JSON, the
//! token, the loopback names a service without one answers, and SIGTERM.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::serve::{free_port, limit_store, raw, Serve};
use proptest::prelude::*;
use serde_json::Value;

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";
const BODY: &str = r#"{"keys": {"account": "ada@example.com", "ip": "192.0.2.7"}}"#;

/// `(name, r or q, t or w)` of a RateLimit or RateLimit-Policy field, parsed
/// as a structured field.
fn field(value: &str, first: &str, second: &str) -> (String, i64, i64) {
    let list = sfv::Parser::parse_list(value.as_bytes()).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    let sfv::ListEntry::Item(item) = &list[0] else { panic!("{value:?}: not an item") };
    let name = match &item.bare_item {
        sfv::BareItem::String(s) => s.clone(),
        other => panic!("{value:?}: the name is {other:?}"),
    };
    let int = |key: &str| match item.params.get(key) {
        Some(sfv::BareItem::Integer(i)) => *i,
        other => panic!("{value:?}: {key} is {other:?}"),
    };
    (name, int(first), int(second))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_allowed_then_limited_with_its_fields_then_reset() {
    let serve = Serve::start(None, &[], &[]).await;
    for left in (0..5).rev() {
        let r = serve.post(SIGN_IN, BODY).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let body = r.json();
        assert_eq!((body["allowed"].as_bool(), body["remaining"].as_u64()), (Some(true), Some(left)));
        assert!(body["reset_at"].as_i64().unwrap() > 1_700_000_000_000);
        let policy = field(r.header("ratelimit-policy").unwrap(), "q", "w");
        assert_eq!(policy, ("sign-in/account".into(), 5, 900));
        let (_, r_left, _) = field(r.header("ratelimit").unwrap(), "r", "t");
        assert_eq!(r_left, i64::try_from(left).unwrap());
    }
    let r = serve.post(SIGN_IN, BODY).await;
    assert_eq!(r.status, 429, "{}", r.body);
    let body = r.json();
    assert_eq!(body["allowed"], Value::Bool(false));
    assert_eq!(body["limited_by"], "account");
    let retry_ms = body["retry_after_ms"].as_u64().unwrap();
    assert!((890_000..=900_000).contains(&retry_ms), "{retry_ms}");
    let (name, left, t) = field(r.header("ratelimit").unwrap(), "r", "t");
    assert_eq!((name.as_str(), left), ("sign-in/account", 0));
    let retry_after: i64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= t && retry_after * 1_000 >= i64::try_from(retry_ms).unwrap(), "{retry_after} vs t={t}");

    let r = serve.post("/v1/limits/sign-in/reset", r#"{"keys": {"account": "ADA@example.com"}}"#).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(serve.post(SIGN_IN, BODY).await.status, 200, "the reset cleared the account (folded)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limits_and_health_are_listed() {
    let serve = Serve::start(None, &[], &[]).await;
    let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
    assert_eq!(r.status, 200);
    let limits = r.json()["limits"].as_array().unwrap().clone();
    let sign_in = limits.iter().find(|l| l["name"] == "sign-in").unwrap();
    assert_eq!(sign_in["policy"], "deny");
    assert_eq!(sign_in["parts"][0]["name"], "account");
    assert_eq!(sign_in["parts"][0]["budget"], 5);
    assert_eq!(sign_in["parts"][0]["window_ms"], 900_000);
    assert_eq!(limits.len(), 5);
    let r = serve.request("GET", "/healthz", &[], b"").await.unwrap();
    assert_eq!((r.status, r.json()["status"].as_str()), (200, Some("ok")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_with_a_json_body_that_says_what_to_fix() {
    let serve = Serve::start(None, &[], &[]).await;
    let json = [("content-type", "application/json")];
    let big = format!(r#"{{"keys": {{"account": "{}"}}}}"#, "a".repeat(20_000));
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], Vec<u8>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("/v1/limits/nope/attempt", &json, BODY.into(), 404, "unknown-limit"),
        (SIGN_IN, &json, b"{not json".to_vec(), 400, "invalid-json"),
        (SIGN_IN, &json, b"[1, 2]".to_vec(), 422, "invalid-body"),
        (SIGN_IN, &json, br#"{"keys": {"account": 7, "ip": "192.0.2.1"}}"#.to_vec(), 422, "invalid-body"),
        (SIGN_IN, &json, br#"{"keys": ["a"]}"#.to_vec(), 422, "invalid-body"),
        (SIGN_IN, &json, br#"{"keys": {"account": "a"}, "more": 1}"#.to_vec(), 422, "invalid-body"),
        (SIGN_IN, &json, br#"{"keys": {"account": "a"}}"#.to_vec(), 422, "missing-part"),
        (
            SIGN_IN,
            &json,
            br#"{"keys": {"account": "a", "ip": "192.0.2.1", "email": "x"}}"#.to_vec(),
            422,
            "unknown-part",
        ),
        (SIGN_IN, &json, br#"{"keys": {"account": "a", "ip": "not-an-ip"}}"#.to_vec(), 422, "bad-value"),
        (SIGN_IN, &json, b"{\"keys\": {\"account\": \"\xff\xfe\"}}".to_vec(), 400, "invalid-json"),
        (SIGN_IN, &json, Vec::new(), 400, "empty-body"),
        (SIGN_IN, &[("content-type", "text/plain")], BODY.into(), 415, "unsupported-media-type"),
        (SIGN_IN, &[], BODY.into(), 415, "unsupported-media-type"),
        (SIGN_IN, &json, big.into_bytes(), 413, "body-too-large"),
        ("/v2/nothing", &json, BODY.into(), 404, "not-found"),
    ];
    for (path, headers, body, status, kind) in cases {
        let r = serve.request("POST", path, headers, &body).await.unwrap();
        assert_eq!(r.status, status, "{path} {:?}: {}", String::from_utf8_lossy(&body[..body.len().min(60)]), r.body);
        let answer = r.json();
        assert_eq!(answer["kind"], kind, "{}", r.body);
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()), "{}", r.body);
    }
    let r = serve.request("GET", SIGN_IN, &[], b"").await.unwrap();
    assert_eq!((r.status, r.json()["kind"].as_str()), (405, Some("method-not-allowed")));
    // A path that is no route is told every route there is.
    let r = serve.request("GET", "/v2/nothing", &[], b"").await.unwrap();
    let said = r.json()["error"].as_str().unwrap_or_default().to_owned();
    for route in ["/attempt", "/reset", "GET /v1/limits", "/healthz", "/metrics", "GET /", "/openapi.json"] {
        assert!(said.contains(route), "the 404 names {route}: {said}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_route_but_health_needs_it() {
    let token = "a-long-random-token-0123456789abcdef";
    let serve = Serve::start(None, &[("LIMIT_STORE_API_TOKEN", token)], &[]).await;
    let json = ("content-type", "application/json");
    let bearer = format!("Bearer {token}");
    for auth in [None, Some("Bearer wrong"), Some("Basic abc")] {
        let mut headers = vec![json];
        headers.extend(auth.map(|a| ("authorization", a)));
        let r = serve.request("POST", SIGN_IN, &headers, BODY.as_bytes()).await.unwrap();
        assert_eq!((r.status, r.json()["kind"].as_str()), (401, Some("unauthorized")), "{auth:?}");
        let r = serve.request("GET", "/v1/limits", &headers[1..], b"").await.unwrap();
        assert_eq!(r.status, 401);
    }
    let r = serve.request("POST", SIGN_IN, &[json, ("authorization", &bearer)], BODY.as_bytes()).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(serve.request("GET", "/healthz", &[], b"").await.unwrap().status, 200, "health stays open");
}

/// Without a token, a request addressed to another name (a page that renamed
/// itself to 127.0.0.1: DNS rebinding) is refused and counts nothing;
/// loopback names pass; with a token, any name that carries it passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_only_loopback_names_are_answered() {
    let serve = Serve::start(None, &[], &[]).await;
    let reset = |host: &str| {
        format!(
            "POST /v1/limits/sign-in/reset HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\r\n{BODY}",
            BODY.len()
        )
    };
    for _ in 0..5 {
        serve.post(SIGN_IN, BODY).await;
    }
    for host in ["evil.example", "evil.example:80", "localhost.evil.example", "0.0.0.0", "[::2]"] {
        let r = raw(&serve.addr, reset(host).as_bytes()).await;
        assert_eq!((r.status, r.json()["kind"].as_str()), (421, Some("not-loopback-host")), "{host}: {}", r.body);
        let r =
            raw(&serve.addr, format!("GET / HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes()).await;
        assert_eq!(r.status, 421, "{host}: the status page too");
    }
    let r = serve.post(SIGN_IN, BODY).await;
    assert!(!r.json()["allowed"].as_bool().unwrap(), "no reset went through: {}", r.body);
    let port = serve.addr.rsplit_once(':').unwrap().1;
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}"), "app.localhost".to_owned()] {
        let r = raw(&serve.addr, reset(&host).as_bytes()).await;
        assert_eq!(r.status, 204, "{host}: {}", r.body);
    }
    assert!(serve.post(SIGN_IN, BODY).await.json()["allowed"].as_bool().unwrap(), "reset by a loopback name");

    let token = "a-long-random-token-0123456789abcdef";
    let named = Serve::start(None, &[("LIMIT_STORE_API_TOKEN", token)], &[]).await;
    let with_token = format!(
        "GET /v1/limits HTTP/1.1\r\nhost: limits.internal.example\r\nauthorization: Bearer {token}\r\n\
         connection: close\r\n\r\n"
    );
    assert_eq!(raw(&named.addr, with_token.as_bytes()).await.status, 200, "with a token, any name");
}

#[test]
fn serve_refuses_to_listen_beyond_loopback_without_a_token() {
    let out = limit_store()
        .args(["serve", "--listen", &format!("0.0.0.0:{}", free_port())])
        .env_remove("LIMIT_STORE_API_TOKEN")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("LIMIT_STORE_API_TOKEN") && err.contains("127.0.0.1"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_and_exits_zero() {
    let mut serve = Serve::start(None, &[], &[]).await;
    let pid = serve.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = serve.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "still running 5 s after SIGTERM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}");
}

/// Random bodies, random limits: always an answer in JSON, never a 5xx.
#[test]
fn random_bodies_never_make_a_5xx() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let serve = runtime.block_on(Serve::start(None, &[], &[]));
    let strategy = (proptest::collection::vec(any::<u8>(), 0..300), any::<bool>(), "[a-z-]{1,12}");
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig { cases: 64, ..ProptestConfig::default() });
    runner
        .run(&strategy, |(body, json, limit)| {
            let headers: &[(&str, &str)] = if json { &[("content-type", "application/json")] } else { &[] };
            for path in [format!("/v1/limits/{limit}/attempt"), SIGN_IN.to_owned()] {
                let r = runtime.block_on(serve.request("POST", &path, headers, &body)).unwrap();
                prop_assert!(r.status < 500, "{} for {:?}: {}", r.status, body, r.body);
                prop_assert!(serde_json::from_str::<Value>(&r.body).is_ok(), "not JSON: {}", r.body);
            }
            Ok(())
        })
        .unwrap();
    drop(serve);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_attempts_calls_and_requests_without_keys() {
    let serve = Serve::start(None, &[], &[]).await;
    for _ in 0..6 {
        serve.post(SIGN_IN, BODY).await;
    }
    serve.post("/v1/limits/nope/attempt", BODY).await;
    let r = serve.request("GET", "/metrics", &[], b"").await.unwrap();
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().starts_with("text/plain"));
    let text = r.body;
    for line in [
        r#"limit_store_attempts_total{limit="sign-in",outcome="allowed"} 5"#,
        r#"limit_store_attempts_total{limit="sign-in",outcome="limited"} 1"#,
        r#"limit_store_http_requests_total{route="/v1/limits/{name}/attempt",status="200"} 5"#,
        r#"limit_store_http_requests_total{route="/v1/limits/{name}/attempt",status="429"} 1"#,
        r#"limit_store_http_requests_total{route="/v1/limits/{name}/attempt",status="404"} 1"#,
        "limit_store_store_call_seconds_count 7",
        "limit_store_store_calls_in_flight 0",
        "limit_store_live_entries 2",
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
    }
    assert!(text.contains("limit_store_fill_ratio ") && text.contains("limit_store_sweeps "), "{text}");
    assert!(!text.contains("ada@example.com") && !text.contains("192.0.2.7"), "a key in the metrics:\n{text}");
}
