//! Slow and idle clients against the real `serve` over real sockets: a
//! request head or body that does not arrive in time is closed (408 when part
//! of it came), at most `max_connections` are open at once (past it, new ones
//! wait), the cap fits the process's open-file limit, and SIGTERM drains for
//! at most `shutdown_grace`, then exits 0. The timeouts are short here
//! (`LIMIT_STORE_REQUEST_TIMEOUT`); their defaults are proven in
//! `src/config/serve.rs`.

use std::time::{Duration, Instant};

use crate::common::serve::{parse, read_until_closed, scratch, Serve, Start};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";
const BODY: &str = r#"{"keys": {"account": "slow@example.com", "ip": "192.0.2.70"}}"#;

/// `n` connections that each send half a request head and nothing more.
async fn half_heads(addr: &str, n: usize) -> Vec<TcpStream> {
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/limits/sign-in/attempt HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-ty").await.unwrap();
        streams.push(s);
    }
    streams
}

/// The head of a POST to sign-in whose body is `len` bytes, and the first
/// `sent` of them.
fn half_body(len: usize, sent: usize) -> Vec<u8> {
    let mut bytes = format!(
        "POST {SIGN_IN} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n"
    )
    .into_bytes();
    bytes.extend(std::iter::repeat_n(b' ', sent));
    bytes
}

/// A `GET /healthz` on a new connection, answered 200 within `limit`.
async fn health_within(addr: &str, limit: Duration) {
    let asked = crate::common::serve::request(addr, "GET", "/healthz", &[], b"");
    let r = tokio::time::timeout(limit, asked).await.unwrap_or_else(|_| panic!("no answer within {limit:?}"));
    assert_eq!(r.unwrap().status, 200);
}

/// Whether the server closes `stream` within `limit`, and what it sent.
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> Option<Vec<u8>> {
    read_until_closed(stream, limit).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_heads_are_closed_with_408_and_others_are_answered_meanwhile() {
    let serve = Serve::start(None, &[("LIMIT_STORE_REQUEST_TIMEOUT", "2s")], &[]).await;
    let started = Instant::now();
    let mut idle = half_heads(&serve.addr, 300).await;
    let r = serve.post(SIGN_IN, BODY).await;
    assert_eq!(r.status, 200, "a request is answered while 300 heads hang: {}", r.body);
    for (i, stream) in idle.iter_mut().enumerate() {
        let left = Duration::from_secs(6).saturating_sub(started.elapsed());
        let sent = closed_within(stream, left).await.unwrap_or_else(|| panic!("connection {i} still open after 6 s"));
        let answer = parse(&sent);
        assert_eq!(answer.status, 408, "connection {i}: {:?}", String::from_utf8_lossy(&sent));
        assert_eq!(answer.json()["kind"], "request-timeout", "{}", answer.body);
    }
    assert!(started.elapsed() >= Duration::from_millis(1_900), "closed before the timeout: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_body_is_answered_408_and_closed() {
    let serve = Serve::start(None, &[("LIMIT_STORE_REQUEST_TIMEOUT", "2s")], &[]).await;
    let mut stream = TcpStream::connect(&serve.addr).await.unwrap();
    stream.write_all(&half_body(100, 10)).await.unwrap();
    let sent = closed_within(&mut stream, Duration::from_secs(5)).await.expect("closed within 5 s");
    let answer = parse(&sent);
    assert_eq!(answer.status, 408, "{:?}", String::from_utf8_lossy(&sent));
    assert_eq!(answer.json()["kind"], "request-timeout", "{}", answer.body);
    assert_eq!(answer.header("connection"), Some("close"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_new_ones_wait_for_a_place() {
    let serve = Serve::start(None, &[("LIMIT_STORE_MAX_CONNECTIONS", "4")], &[]).await;
    // Four connections, each answered once and kept open (keep-alive).
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(&serve.addr).await.unwrap();
        s.write_all(b"GET /v1/limits HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), tokio::io::AsyncReadExt::read(&mut s, &mut buf))
            .await
            .expect("answered")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&buf[..n]));
        held.push(s);
    }
    let addr = serve.addr.clone();
    let fifth = tokio::spawn(async move { crate::common::serve::request(&addr, "GET", "/v1/limits", &[], b"").await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!fifth.is_finished(), "a fifth connection was served while four were open");
    drop(held.pop());
    let r = tokio::time::timeout(Duration::from_secs(5), fifth).await.expect("answered once a place was free");
    assert_eq!(r.unwrap().unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_few_open_files_the_cap_is_lowered_and_no_accept_fails() {
    let dir = scratch("few-files");
    let log = dir.join("serve.log");
    let env = [("LIMIT_STORE_REQUEST_TIMEOUT", "2s")];
    let serve =
        Serve::start_with(Start { env: &env, log: Some(&log), open_files: Some(200), ..Start::default() }).await;
    let mut idle = half_heads(&serve.addr, 250).await;
    let started = Instant::now();
    health_within(&serve.addr, Duration::from_secs(12)).await;
    for stream in &mut idle {
        let left = Duration::from_secs(12).saturating_sub(started.elapsed());
        assert!(closed_within(stream, left).await.is_some(), "a hanging head still open after 12 s");
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("limit-store-connections-capped"), "the lowered cap is logged: {text}");
    assert!(!text.to_lowercase().contains("too many open files"), "an accept failed: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_what_is_in_flight_within_the_grace_then_exits_zero() {
    let env = [("LIMIT_STORE_SHUTDOWN_GRACE", "2s")];
    let mut serve = Serve::start(None, &env, &[]).await;
    let body = BODY.as_bytes();
    let mut finishing = TcpStream::connect(&serve.addr).await.unwrap();
    finishing.write_all(&half_body(body.len(), 0)).await.unwrap();
    let mut stuck = TcpStream::connect(&serve.addr).await.unwrap();
    stuck.write_all(&half_body(100, 10)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    serve.signal("TERM");
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    finishing.write_all(body).await.unwrap();
    let sent = closed_within(&mut finishing, Duration::from_secs(5)).await.expect("answered and closed");
    assert_eq!(parse(&sent).status, 200, "the request in flight was finished: {:?}", String::from_utf8_lossy(&sent));
    let status = serve.exit_within(Duration::from_secs(5)).await.expect("exited within the grace and a margin");
    assert!(status.success(), "{status:?}");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1_900), "it did not wait for the body in flight: {took:?}");
    assert!(took < Duration::from_millis(4_000), "it waited past the grace: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_the_timeout_without_an_answer() {
    let serve = Serve::start(None, &[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], &[]).await;
    let mut stream = TcpStream::connect(&serve.addr).await.unwrap();
    stream.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").await.unwrap();
    let started = Instant::now();
    let sent = closed_within(&mut stream, Duration::from_secs(4)).await.expect("closed within 4 s");
    let took = started.elapsed();
    let answer = parse(&sent);
    assert_eq!(answer.status, 200);
    assert!(!answer.body.contains("HTTP/1.1 408"), "an idle connection got a 408: {:?}", answer.body);
    assert!(took >= Duration::from_millis(900), "closed before the timeout: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_loses_its_connection_after_the_timeout() {
    let env = [("LIMIT_STORE_REQUEST_TIMEOUT", "2s"), ("LIMIT_STORE_MAX_CONNECTIONS", "1")];
    let serve = Serve::start(None, &env, &[]).await;
    // Answers pile up unread until the socket's buffers are full and a
    // write waits: the one place stays taken until that write gives up.
    let mut greedy = TcpStream::connect(&serve.addr).await.unwrap();
    let pipelined = "GET /openapi.json HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".repeat(3_000);
    greedy.write_all(pipelined.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    health_within(&serve.addr, Duration::from_secs(8)).await;
    assert!(started.elapsed() >= Duration::from_millis(1_000), "the place was free: {:?}", started.elapsed());
    drop(greedy);
}
