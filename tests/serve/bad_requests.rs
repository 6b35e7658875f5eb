//! Requests no client library would send, as raw bytes over a real socket to
//! the real `serve`: a path that is not UTF-8 (escaped or raw), heads that do
//! not parse, a content length that is not a number, a head past 16 KiB. Every
//! answer is a 4xx with the JSON error body `{"error", "kind"}` (SPEC §9).

use crate::common::serve::{raw, Serve};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_4xx_is_the_json_error() {
    let serve = Serve::start(None, &[], &[]).await;
    let json = "content-type: application/json\r\n";
    let body = r#"{"keys": {"account": "ada@example.com", "ip": "192.0.2.7"}}"#;
    let post = |path: &str| -> Vec<u8> {
        format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n{json}content-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    let mut raw_path = b"POST /v1/limits/".to_vec();
    raw_path.extend_from_slice(b"\xff\xfe/attempt HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\n\r\n");
    let many_headers: String = (0..200).map(|i| format!("x-h{i}: {i}\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("an escaped path that is not UTF-8", post("/v1/limits/%FF/attempt"), 400),
        ("an escaped reset path that is not UTF-8", post("/v1/limits/%C3%28/reset"), 400),
        ("raw bytes in the path", raw_path, 400),
        (
            "a content length that is not a number",
            b"POST /v1/limits/sign-in/attempt HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: ten\r\n\r\n".to_vec(),
            400,
        ),
        (
            "two content lengths",
            b"POST /v1/limits/sign-in/attempt HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\n{}"
                .to_vec(),
            400,
        ),
        ("a header name with a space", b"GET /v1/limits HTTP/1.1\r\nhost: 127.0.0.1\r\nbad name: 1\r\n\r\n".to_vec(), 400),
        ("a method with a control byte", b"G\x01T /v1/limits HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_vec(), 400),
        ("an unknown version", b"GET /v1/limits HTTP/7.1\r\nhost: 127.0.0.1\r\n\r\n".to_vec(), 400),
        ("too many headers", format!("GET /v1/limits HTTP/1.1\r\nhost: 127.0.0.1\r\n{many_headers}\r\n").into_bytes(), 431),
        (
            "a path of 70,000 bytes",
            format!("GET /{} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n", "a".repeat(70_000)).into_bytes(),
            431,
        ),
        (
            "a head of 20,000 bytes (past 16 KiB)",
            format!("GET /v1/limits HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: {}\r\n\r\n", "a".repeat(20_000)).into_bytes(),
            431,
        ),
    ];
    for (what, bytes, status) in cases {
        let r = raw(&serve.addr, &bytes).await;
        assert_eq!(r.status, status, "{what}: {} {:?}", r.status, r.body);
        assert!(
            r.header("content-type").is_some_and(|t| t.starts_with("application/json")),
            "{what}: {:?} {:?}",
            r.headers,
            r.body
        );
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{what}");
        let answer = r.json();
        assert!(answer["kind"].as_str().is_some_and(|k| !k.is_empty()), "{what}: {}", r.body);
        assert!(answer["error"].as_str().is_some_and(|e| !e.is_empty()), "{what}: {}", r.body);
        if status == 431 {
            // A long path is one too: the answer says what counts toward the bound.
            let error = answer["error"].as_str().unwrap_or_default();
            assert!(error.contains("path") && error.contains("16 KiB"), "{what}: {error}");
        }
    }
}

/// A query that is not UTF-8 is not read by any route: it is no error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_that_is_not_utf8_is_ignored() {
    let serve = Serve::start(None, &[], &[]).await;
    let r = raw(&serve.addr, b"GET /v1/limits?%FF=%FE HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.json()["limits"].is_array());
}

/// A bad head sent on a connection right after a good request (pipelined,
/// in one write) is answered in JSON too, after the good one's answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_head_after_a_good_request_is_answered_in_json() {
    let serve = Serve::start(None, &[], &[]).await;
    let r = raw(
        &serve.addr,
        b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nGET /v1/limits HTTP/1.1\r\nbad name: 1\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200);
    let second = r.body.split_once("HTTP/1.1 ").map(|(_, rest)| format!("HTTP/1.1 {rest}")).expect("a second answer");
    let second = crate::common::serve::parse(second.as_bytes());
    assert_eq!(second.status, 400, "{second:?}");
    assert_eq!(second.json()["kind"], "bad-request", "{second:?}");
}

/// A body that names a field or a part twice is refused (422, the JSON
/// error), on an attempt and on a reset, and counts nothing: a proxy in
/// front may read the first of the two while a parser keeps the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_given_twice_is_refused_and_counts_nothing() {
    let serve = Serve::start(None, &[], &[]).await;
    let cases = [
        (
            "/v1/limits/sign-in/attempt",
            r#"{"keys": {"account": "ada@example.com", "account": "eve@example.com", "ip": "192.0.2.7"}}"#,
            "account",
        ),
        ("/v1/limits/api/attempt", r#"{"keys": {"client": "c-1"}, "cost": 0, "cost": 500}"#, "cost"),
        ("/v1/limits/api/attempt", r#"{"keys": {"client": "c-1"}, "keys": {"client": "c-2"}}"#, "keys"),
        ("/v1/limits/api/attempt", r#"{"keys": {"client": "c-1", "cl\u0069ent": "c-2"}}"#, "client"),
        (
            "/v1/limits/sign-in/reset",
            r#"{"keys": {"account": "ada@example.com", "account": "eve@example.com"}}"#,
            "account",
        ),
    ];
    for (path, body, name) in cases {
        let r = serve.post(path, body).await;
        assert_eq!(r.status, 422, "{body}: {}", r.body);
        assert_eq!(r.json()["kind"], "invalid-body", "{body}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains(&format!("\"{name}\" is given twice")), "{}", r.body);
    }
    // Nothing was counted: each client still has its whole budget.
    for client in ["c-1", "c-2"] {
        let r = serve.post("/v1/limits/api/attempt", &format!(r#"{{"keys": {{"client": "{client}"}}}}"#)).await;
        assert_eq!(r.json()["remaining"], 599, "{client}: {}", r.body);
    }
}
