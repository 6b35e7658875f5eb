//! The attacker's pass on what a request carries: costs at the edges of a
//! u64, keys of every odd shape, a flood of new keys against the store's
//! bound, client strings aimed at the metrics' labels and the status page,
//! and a thousand requests pipelined on one connection.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::{api_left, assert_error};
use crate::common::serve::{parse, read_until_closed, settings_file, Reply, Serve};

/// A cost at u64's edge, or past what a double holds exactly, on a budget
/// of 5 is refused whole (no overflow lets it through, nothing is counted);
/// past u64 it is no cost at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn costs_at_the_edges_of_a_u64_count_nothing() {
    let serve = Serve::start(None, &[], &[]).await;
    let path = "/v1/limits/code-sent/attempt";
    let keys = r#""keys": {"destination": "edge@example.com""#;
    for (cost, status, kind) in [
        ("18446744073709551615", 422, "cost-over-budget"),
        ("9007199254740993", 422, "cost-over-budget"),
        ("18446744073709551616", 422, "invalid-cost"),
        ("1e400", 400, "invalid-json"),
        ("-1", 422, "invalid-cost"),
    ] {
        let r = serve.post(path, &format!("{{{keys}}}, \"cost\": {cost}}}")).await;
        assert_error(&r, status, kind, cost);
    }
    let r = serve.post(path, &format!("{{{keys}}}, \"cost\": 0}}")).await;
    assert_eq!(r.json()["remaining"], 5, "{}", r.body);
}

/// Keys of every odd shape: a thousand parts (422), ten thousand (past the
/// body's 16 KiB), a 15 KiB value (counted on its own), an escaped NUL, a
/// lone surrogate (not JSON). Values compare as bytes on an `exact` part,
/// so case and Unicode normalisation make other keys; a `folded` part
/// (`code-sent`'s destination) folds case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_odd_shapes_are_counted_as_bytes_or_refused() {
    let serve = Serve::start(None, &[], &[]).await;
    let attempt = "/v1/limits/api/attempt";
    let parts = |n: usize| (0..n).map(|i| format!(r#""p{i}": "v""#)).collect::<Vec<_>>().join(",");
    assert_error(
        &serve.post(attempt, &format!(r#"{{"keys": {{{}}}}}"#, parts(1_000))).await,
        422,
        "unknown-part",
        "1,000 parts",
    );
    assert_error(
        &serve.post(attempt, &format!(r#"{{"keys": {{{}}}}}"#, parts(10_000))).await,
        413,
        "body-too-large",
        "10,000 parts",
    );
    assert_error(
        &serve.post(attempt, r#"{"keys": {"client": "a\ud800"}}"#).await,
        400,
        "invalid-json",
        "a lone surrogate",
    );
    assert_error(&serve.post(attempt, "{\"keys\": {\"client\": \"a\u{0}\"}}").await, 400, "invalid-json", "a raw NUL");
    let long = "k".repeat(15 * 1024);
    for client in [format!("{long}1"), r"nul\u0000".to_owned(), "Case".to_owned(), "e\u{301}".to_owned()] {
        let r = serve.post(attempt, &format!(r#"{{"keys": {{"client": "{client}"}}}}"#)).await;
        assert_eq!(r.status, 200, "{}", r.body);
    }
    for (other, left) in
        [(format!("{long}2"), 600), (format!("{long}1"), 599), ("nul".into(), 600), (r"nul\u0000".into(), 599)]
    {
        assert_eq!(api_left(&serve, &other).await, left, "{}", &other[other.len().saturating_sub(8)..]);
    }
    for (other, left) in [("case", 600), ("Case", 599), ("\u{e9}", 600), ("e\u{301}", 599)] {
        assert_eq!(api_left(&serve, other).await, left, "{other:?}");
    }
    let code = "/v1/limits/code-sent/attempt";
    assert_eq!(serve.post(code, r#"{"keys": {"destination": "Folded@Example.com"}}"#).await.status, 200);
    let r = serve.post(code, r#"{"keys": {"destination": "folded@example.com"}, "cost": 0}"#).await;
    assert_eq!(r.json()["remaining"], 4, "{}", r.body);
}

/// A flood of new keys past the store's bound (`max_entries = 40`) leaves
/// the store within it, and each attempt past it gets a clear answer by its
/// limit's policy: `sign-in` (deny) a 503 `store-unavailable`, `api` (allow)
/// a 200 that says `"degraded": "full"`. Never a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_new_keys_stays_within_the_bound_and_says_so() {
    let config = settings_file("[rate_limit]\nmax_entries = 40\n");
    let serve = Serve::start(Some(&config), &[], &[]).await;
    let (mut refused, mut degraded) = (0, 0);
    for i in 0..60 {
        let r = serve.post("/v1/limits/api/attempt", &format!(r#"{{"keys": {{"client": "flood-{i}"}}}}"#)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        degraded += usize::from(r.json()["degraded"] == "full");
        let body = format!(r#"{{"keys": {{"account": "flood-{i}@example.com", "ip": "192.0.2.{i}"}}}}"#);
        let r = serve.post("/v1/limits/sign-in/attempt", &body).await;
        assert!(matches!(r.status, 200 | 503), "{}", r.body);
        if r.status == 503 {
            assert_eq!(
                (r.json()["kind"].as_str(), r.json()["degraded"].as_str()),
                (Some("store-unavailable"), Some("full"))
            );
            refused += 1;
        }
    }
    assert!(refused > 0 && degraded > 0, "the flood never reached the bound: {refused} {degraded}");
    let metrics = serve.request("GET", "/metrics", &[], b"").await.unwrap().body;
    let live: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("limit_store_live_entries "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(live <= 40, "{live} live entries past a bound of 40");
    let _ = std::fs::remove_file(config);
}

/// Unknown limit names, random paths and methods, and keys that are HTML
/// reach no metric's label and no part of the status page: the metrics'
/// series stay as many as the service's own routes and statuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_client_string_reaches_a_label_or_the_page() {
    let serve = Serve::start(None, &[], &[]).await;
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let round = |i: usize| {
        let addr = serve.addr.clone();
        async move {
            let json = [("content-type", "application/json")];
            let body = format!(r#"{{"keys": {{"client": "<b>key-{i}</b>"}}}}"#);
            let mark = format!("mark{i}");
            for (method, path) in [
                ("POST", format!("/v1/limits/{mark}/attempt")),
                ("POST", format!("/v1/limits/%3Cscript%3E{mark}/reset")),
                ("POST", "/v1/limits/api/attempt".to_owned()),
                ("GET", format!("/{mark}")),
                ("M{i}", format!("/v1/limits?{mark}")),
            ] {
                let method = method.replace("{i}", &i.to_string());
                crate::common::serve::request(&addr, &method, &path, &json, body.as_bytes()).await.unwrap();
            }
        }
    };
    round(0).await;
    serve.request("GET", "/metrics", &[], b"").await.unwrap();
    let before = series(&serve.request("GET", "/metrics", &[], b"").await.unwrap().body);
    for i in 1..60 {
        round(i).await;
    }
    let metrics = serve.request("GET", "/metrics", &[], b"").await.unwrap().body;
    assert!(!metrics.contains("mark") && !metrics.contains("key-"), "{metrics}");
    assert_eq!(series(&metrics), before, "new series: {metrics}");
    let page = serve.request("GET", "/", &[], b"").await.unwrap().body;
    assert!(!page.contains("mark") && !page.contains("key-") && !page.contains("<script"), "{page}");
}

/// A thousand requests pipelined in one write on one connection are each
/// answered, in order, and the process stays small while it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pipelined_requests_are_answered_in_order() {
    let serve = Serve::start(None, &[], &[]).await;
    let rss_before = resident_kib(serve.child.id());
    let mut bytes = Vec::new();
    for i in 0..1000 {
        let request = match i % 3 {
            0 => "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_owned(),
            1 => format!("GET /nowhere-{i} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"),
            _ => {
                let body = format!(r#"{{"keys": {{"client": "pipe-{i}"}}}}"#);
                format!(
                    "POST /v1/limits/api/attempt HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        };
        bytes.extend_from_slice(request.as_bytes());
    }
    bytes.extend_from_slice(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n");
    let mut stream = TcpStream::connect(&serve.addr).await.unwrap();
    stream.write_all(&bytes).await.unwrap();
    let answers = read_until_closed(&mut stream, Duration::from_secs(10)).await.expect("all answered, then closed");
    let answers = split(&answers);
    assert_eq!(answers.len(), 1001);
    for (i, r) in answers.iter().take(1000).enumerate() {
        let expected = match i % 3 {
            0 => (200, "status"),
            1 => (404, "kind"),
            _ => (200, "allowed"),
        };
        assert_eq!((r.status, r.json().get(expected.1).is_some()), (expected.0, true), "answer {i}: {}", r.body);
    }
    if let (Some(before), Some(after)) = (rss_before, resident_kib(serve.child.id())) {
        assert!(after < before + 64 * 1024, "{before} KiB, then {after} KiB");
    }
}

/// The answers in `bytes`, one after another, each cut at its `content-length`.
fn split(mut bytes: &[u8]) -> Vec<Reply> {
    let mut answers = Vec::new();
    while let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = parse(&bytes[..end + 4]);
        let length: usize = head.header("content-length").map_or(0, |n| n.parse().unwrap());
        answers.push(parse(&bytes[..end + 4 + length]));
        bytes = &bytes[end + 4 + length..];
    }
    answers
}

/// A process's resident memory (KiB), where `/proc` tells it.
fn resident_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().strip_suffix("kB")?.trim().parse().ok()
}
