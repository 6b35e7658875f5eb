//! A second attacker's pass on serve's HTTP port, as raw bytes over real
//! sockets to the real binary: requests framed two ways, headers the
//! service reads given twice, bodies it would read some other way, targets
//! in absolute form, the token sent oddly, odd methods and paths, a
//! cross-site form. Each is answered once, with a 4xx in JSON
//! that says what to send (never a 500, a hang or a second reading), and a
//! refusal that leaves the body unread closes the connection. Bodies, keys,
//! the store's bound, the metrics and pipelining are in [`bodies`]; the
//! names a request is addressed to in [`hosts`].

mod bodies;
mod hosts;

use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::common::serve::{parse, read_until_closed, Reply, Serve};

/// Long enough that a connection left open by mistake is still open when
/// [`answer_and_close`] gives up on it.
const SLOW: (&str, &str) = ("LIMIT_STORE_REQUEST_TIMEOUT", "30s");

/// A POST of `body` as JSON to `path`, with the head lines `lines` (each
/// ending in CRLF, the `host` among them when one is sent).
pub(super) fn post(path: &str, lines: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\n{lines}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `bytes` and reads the answer, which must end with the connection
/// closed by the server within 3 s though the request did not ask for it.
async fn answer_and_close(addr: &str, bytes: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let answer = read_until_closed(&mut stream, Duration::from_secs(3)).await;
    let answer = answer.unwrap_or_else(|| panic!("still open: {:?}", String::from_utf8_lossy(&bytes[..60])));
    parse(&answer)
}

/// `r` is the JSON error `kind` with `status`, read as JSON by a browser,
/// with a message that says what to do.
pub(super) fn assert_error(r: &Reply, status: u16, kind: &str, what: &str) {
    assert_eq!(r.status, status, "{what}: {} {:?}", r.status, r.body);
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"), "{what}");
    let body = r.json();
    assert_eq!(body["kind"], kind, "{what}: {}", r.body);
    assert!(body["error"].as_str().is_some_and(|e| e.len() > 20), "{what}: {}", r.body);
}

/// What the `api` limit has left for `client`, by a check that counts nothing.
pub(super) async fn api_left(serve: &Serve, client: &str) -> u64 {
    let r = serve.post("/v1/limits/api/attempt", &format!(r#"{{"keys": {{"client": "{client}"}}, "cost": 0}}"#)).await;
    r.json()["remaining"].as_u64().unwrap_or_else(|| panic!("{}", r.body))
}

pub(super) const HOST: &str = "host: 127.0.0.1\r\n";
pub(super) const ATTEMPT: &str = "/v1/limits/api/attempt";

/// A body framed by both `Content-Length` and chunks is read by its chunks
/// alone and its connection closed, so what a front proxy reading the
/// length would pass on as the next request is never answered; a transfer
/// coding other than chunked, or a `Content-Encoding`, is refused, never
/// read as if it were not there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_framed_two_ways_is_read_one_way_or_refused() {
    let serve = Serve::start(None, &[SLOW], &[]).await;
    let smuggled = post(ATTEMPT, HOST, r#"{"keys": {"client": "smuggled"}}"#);
    let mut body = b"0\r\n\r\n".to_vec();
    body.extend_from_slice(&smuggled);
    for framing in [
        "content-length: {n}\r\ntransfer-encoding: chunked\r\n",
        "transfer-encoding: chunked\r\ncontent-length: {n}\r\n",
    ] {
        let mut bytes = format!("POST {ATTEMPT} HTTP/1.1\r\n{HOST}content-type: application/json\r\n").into_bytes();
        bytes.extend_from_slice(framing.replace("{n}", &body.len().to_string()).as_bytes());
        bytes.extend_from_slice(b"\r\n");
        bytes.extend_from_slice(&body);
        let r = answer_and_close(&serve.addr, &bytes).await;
        assert_error(&r, 400, "empty-body", framing);
        assert!(!r.body.contains("HTTP/1.1"), "a second answer: {}", r.body);
    }
    assert_eq!(api_left(&serve, "smuggled").await, 600, "the request after the chunks was answered");

    let json = r#"{"keys": {"client": "coded"}}"#;
    let chunked = format!("{:x}\r\n{json}\r\n0\r\n\r\n", json.len());
    let head = |lines: &str| format!("POST {ATTEMPT} HTTP/1.1\r\n{HOST}content-type: application/json\r\n{lines}\r\n");
    let cases = [
        ("gzip, then chunks", format!("{}{chunked}", head("transfer-encoding: gzip, chunked\r\n")), 400, "bad-framing"),
        (
            "gzip and chunked on two lines",
            format!("{}{chunked}", head("transfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n")),
            400,
            "bad-framing",
        ),
        (
            "a content coding",
            format!("{}{json}", head(&format!("content-encoding: gzip\r\ncontent-length: {}\r\n", json.len()))),
            415,
            "unsupported-media-type",
        ),
        (
            "24 KB of chunk extensions",
            format!(
                "{}{}0\r\n\r\n",
                head("transfer-encoding: chunked\r\n"),
                json.bytes().map(|b| format!("1;{}\r\n{}\r\n", "x".repeat(1000), b as char)).collect::<String>()
            ),
            400,
            "unreadable-body",
        ),
    ];
    for (what, bytes, status, kind) in cases {
        assert_error(&answer_and_close(&serve.addr, bytes.as_bytes()).await, status, kind, what);
    }
    assert_eq!(api_left(&serve, "coded").await, 600, "a refused body was counted");
}

/// A `Content-Length` past the 16 KiB a body may take is refused from the
/// head alone: a client that asked `Expect: 100-continue` is not told to
/// send it, and no client waits for the request timeout. Under the cap,
/// the client is told to go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_body_over_16_kib_is_refused_before_it_is_read() {
    let serve = Serve::start(None, &[SLOW], &[]).await;
    for expect in ["", "expect: 100-continue\r\n"] {
        let head = format!(
            "POST {ATTEMPT} HTTP/1.1\r\n{HOST}{expect}content-type: application/json\r\ncontent-length: 100000\r\n\r\n"
        );
        let started = Instant::now();
        let r = answer_and_close(&serve.addr, head.as_bytes()).await;
        assert!(started.elapsed() < Duration::from_secs(2), "{expect:?}: waited for the body");
        assert_error(&r, 413, "body-too-large", expect);
        assert!(r.json()["error"].as_str().unwrap().contains("100000 bytes"), "{}", r.body);
    }
    let json = r#"{"keys": {"client": "expect"}}"#;
    let head = format!(
        "POST {ATTEMPT} HTTP/1.1\r\n{HOST}expect: 100-continue\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        json.len()
    );
    let mut stream = TcpStream::connect(&serve.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut first = [0u8; 25];
    tokio::io::AsyncReadExt::read_exact(&mut stream, &mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
    stream.write_all(json.as_bytes()).await.unwrap();
    let r = parse(&read_until_closed(&mut stream, Duration::from_secs(3)).await.unwrap());
    assert_eq!((r.status, r.json()["remaining"].as_u64()), (200, Some(599)), "{}", r.body);
}

/// A body that stops coming is answered 408 in JSON, read as JSON by a
/// browser like every other answer (`nosniff`), and closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_body_is_answered_408_read_as_json() {
    let serve = Serve::start(None, &[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], &[]).await;
    let head =
        format!("POST {ATTEMPT} HTTP/1.1\r\n{HOST}content-type: application/json\r\ncontent-length: 30\r\n\r\n{{");
    assert_error(&answer_and_close(&serve.addr, head.as_bytes()).await, 408, "request-timeout", "a late body");
}

/// `Host`, `Authorization`, `Content-Type` given twice are refused (400
/// `repeated-header`) in either order, never judged by the first: with a
/// token, `Authorization: Bearer <right>` beside a wrong one gets in no
/// more than the wrong one alone. The token's scheme is `Bearer` exactly,
/// and only the whole token passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_read_once_given_twice_is_refused_in_either_order() {
    let token = "a-long-random-token-0123456789abcdef";
    let serve = Serve::start(None, &[SLOW, ("LIMIT_STORE_API_TOKEN", token)], &[]).await;
    let right = format!("authorization: Bearer {token}\r\n");
    let wrong = "authorization: Bearer a-long-random-token-0123456789abcdeX\r\n";
    let body = r#"{"keys": {"client": "twice"}}"#;
    let cases = [
        format!("{HOST}host: evil.example\r\n{right}"),
        format!("host: evil.example\r\n{HOST}{right}"),
        format!("{HOST}{right}{wrong}"),
        format!("{HOST}{wrong}{right}"),
        format!("{HOST}{right}{right}"),
        format!("{HOST}{right}content-type: text/plain\r\n"),
        format!("{HOST}{right}content-encoding: identity\r\ncontent-encoding: gzip\r\n"),
    ];
    for lines in &cases {
        assert_error(&answer_and_close(&serve.addr, &post(ATTEMPT, lines, body)).await, 400, "repeated-header", lines);
    }
    let prefix = &token[..token.len() - 1];
    for (authorization, status) in [
        (format!("bearer {token}"), 401),
        (format!("Bearer\t{token}"), 401),
        (format!("Bearer  {token}"), 401),
        (format!("Bearer {prefix}"), 401),
        (format!("Bearer {token}0"), 401),
        (format!("Bearer {token} \t"), 200), // white space around a value is no part of it (RFC 9110 §5.5)
    ] {
        let lines = format!("{HOST}connection: close\r\nauthorization: {authorization}\r\n");
        let r = crate::common::serve::raw(&serve.addr, &post(ATTEMPT, &lines, body)).await;
        assert_eq!(r.status, status, "{authorization:?}: {}", r.body);
    }
    let check = format!("{HOST}connection: close\r\n{right}");
    let r =
        crate::common::serve::raw(&serve.addr, &post(ATTEMPT, &check, r#"{"keys": {"client": "twice"}, "cost": 0}"#))
            .await;
    assert_eq!(r.json()["remaining"], 599, "only the one right request counted: {}", r.body);
}

/// HEAD on every route, `OPTIONS *`, `CONNECT`, `TRACE`, paths with `//`,
/// `..`, a trailing slash, a 10,000-byte or odd Unicode limit name, and a
/// name that would split a header: each a 4xx in JSON or the route's own
/// answer, never a 500, and the name never reaches a header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_methods_and_paths_are_answered_in_json() {
    let serve = Serve::start(None, &[], &[]).await;
    for path in ["/healthz", "/v1/limits", "/metrics", "/", "/openapi.json"] {
        let r = serve.request("HEAD", path, &[], b"").await.unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, ""), "HEAD {path}");
        assert!(r.header("content-length").is_some_and(|n| n != "0"), "HEAD {path}: {:?}", r.headers);
    }
    let long = "a".repeat(10_000);
    let cases: [(&str, &str, u16, &str); 13] = [
        ("HEAD", ATTEMPT, 405, "method-not-allowed"),
        ("OPTIONS", "*", 404, "not-found"),
        ("CONNECT", "127.0.0.1:80", 404, "not-found"),
        ("TRACE", "/", 405, "method-not-allowed"),
        ("GET", "//v1/limits", 404, "not-found"),
        ("GET", "/v1/limits/", 404, "not-found"),
        ("GET", "/healthz/../v1/limits", 404, "not-found"),
        ("POST", "/v1/limits/api/attempt/", 404, "not-found"),
        ("POST", "/v1/limits/%2e%2e/attempt", 404, "unknown-limit"),
        ("POST", "/v1/limits/api%2Fattempt/attempt", 404, "unknown-limit"),
        ("POST", "/v1/limits/%E2%80%AEipa/attempt", 404, "unknown-limit"),
        ("POST", "/v1/limits/a%0D%0Aset-cookie:%20x=1/attempt", 404, "unknown-limit"),
        ("POST", &format!("/v1/limits/{long}/attempt"), 404, "unknown-limit"),
    ];
    let json = [("content-type", "application/json")];
    for (method, path, status, kind) in cases {
        let r = serve.request(method, path, &json, br#"{"keys": {"client": "odd"}}"#).await.unwrap();
        let what = format!("{method} {}", &path[..path.len().min(60)]);
        if method == "HEAD" {
            assert_eq!((r.status, r.body.as_str()), (status, ""), "{what}");
            continue;
        }
        assert_error(&r, status, kind, &what);
        assert!(r.header("set-cookie").is_none(), "{what}: {:?}", r.headers);
    }
    let r = serve.request("POST", "/v1/limits/api/attempt?client=other", &json, br#"{"keys": {"client": "odd"}}"#);
    assert_eq!(r.await.unwrap().status, 200, "a query is read by no route");
    assert_eq!(api_left(&serve, "odd").await, 599);
}

/// Without a token, a page elsewhere can still make a visitor's browser
/// post to 127.0.0.1 by that name (no rebinding), but only as a form or as
/// text: such a reset is refused (415) and lifts no lockout, and a
/// preflight for JSON gets no CORS answer, so the browser sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_site_form_lifts_no_lockout() {
    let serve = Serve::start(None, &[], &[]).await;
    let body = r#"{"keys": {"account": "csrf@example.com", "ip": "192.0.2.9"}}"#;
    for _ in 0..5 {
        assert_eq!(serve.post("/v1/limits/sign-in/attempt", body).await.status, 200);
    }
    let origin = ("origin", "https://evil.example");
    for content_type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
        let headers = [("content-type", content_type), origin];
        let r = serve.request("POST", "/v1/limits/sign-in/reset", &headers, body.as_bytes()).await.unwrap();
        assert_error(&r, 415, "unsupported-media-type", content_type);
    }
    let preflight =
        [origin, ("access-control-request-method", "POST"), ("access-control-request-headers", "content-type")];
    let r = serve.request("OPTIONS", "/v1/limits/sign-in/reset", &preflight, b"").await.unwrap();
    assert!(r.status >= 400, "{}", r.status);
    assert!(
        r.headers.iter().all(|(name, _)| !name.to_ascii_lowercase().starts_with("access-control-")),
        "{:?}",
        r.headers
    );
    let r = serve.post("/v1/limits/sign-in/attempt", body).await;
    assert_eq!(r.status, 429, "the lockout was lifted: {}", r.body);
}

/// The API's document names each refusal of a head, on every route that
/// can give it, so a client generated from it knows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_names_the_refusals_of_a_head() {
    let serve = Serve::start(None, &[], &[]).await;
    let doc = serve.request("GET", "/openapi.json", &[], b"").await.unwrap().json();
    let said = |path: &str, method: &str, status: &str| {
        doc["paths"][path][method]["responses"][status]["description"].as_str().unwrap_or_default().to_owned()
    };
    for path in ["/v1/limits/{name}/attempt", "/v1/limits/{name}/reset"] {
        let bad = said(path, "post", "400");
        assert!(bad.contains("`repeated-header`") && bad.contains("`bad-framing`"), "{path}: {bad}");
        assert!(bad.contains("`missing-host`"), "{path}: {bad}");
        assert!(said(path, "post", "413").contains("Content-Length"), "{path}");
        assert!(said(path, "post", "415").contains("Content-Encoding"), "{path}");
    }
    for path in ["/v1/limits", "/healthz"] {
        assert!(said(path, "get", "400").contains("`repeated-header`"), "{path}");
        assert!(said(path, "get", "400").contains("`missing-host`"), "{path}");
    }
}

/// An HTTP/2 client with prior knowledge (one pointed at this port in place
/// of `--grpc-listen`, say) gets a 400 in JSON that says this port speaks
/// HTTP/1.1, which some HTTP/2 clients recognise; hyper alone closes on it
/// without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_preface_is_told_this_port_speaks_http_1_1() {
    let serve = Serve::start(None, &[SLOW], &[]).await;
    let settings = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let preface = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".as_slice(), settings].concat();
    let r = answer_and_close(&serve.addr, &preface).await;
    assert_error(&r, 400, "bad-request", "an HTTP/2 preface");
    assert!(r.json()["error"].as_str().unwrap().contains("HTTP/1.1"), "{}", r.body);
}
