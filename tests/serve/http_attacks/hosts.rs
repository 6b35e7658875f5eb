//! The names a request is addressed to, on a service without a token: a
//! target in absolute form, a `Host` that only looks like loopback, and no
//! `Host` at all. Each is judged as a browser would address it, and a
//! request addressed elsewhere counts nothing.

use super::{api_left, assert_error, post, ATTEMPT, HOST};
use crate::common::serve::Serve;

/// Without a token, a target in absolute form is addressed to the name it
/// carries, as `Host` is (RFC 9112 §3.2.2): a foreign one gets 421 whatever
/// `Host` says, and counts nothing; a loopback one is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_in_absolute_form_is_addressed_to_its_own_name() {
    let serve = Serve::start(None, &[], &[]).await;
    let body = r#"{"keys": {"client": "absolute"}}"#;
    let close = "connection: close\r\n";
    let cases = [
        ("http://evil.example/v1/limits/api/attempt", format!("{HOST}{close}"), 421),
        ("http://evil.example:80/v1/limits/api/attempt", format!("host: localhost\r\n{close}"), 421),
        ("http://127.0.0.1/v1/limits/api/attempt", format!("host: evil.example\r\n{close}"), 421),
        ("http://user@127.0.0.1/v1/limits/api/attempt", format!("{HOST}{close}"), 421),
        ("http://127.0.0.1/v1/limits/api/attempt", format!("{HOST}{close}"), 200),
        ("http://localhost:8080/v1/limits/api/attempt", format!("{HOST}{close}"), 200),
    ];
    for (target, lines, status) in &cases {
        let r = crate::common::serve::raw(&serve.addr, &post(target, lines, body)).await;
        match status {
            200 => assert_eq!(r.status, 200, "{target} {lines:?}: {}", r.body),
            _ => assert_error(&r, 421, "not-loopback-host", target),
        }
    }
    let answered = cases.iter().filter(|c| c.2 == 200).count() as u64;
    assert_eq!(api_left(&serve, "absolute").await, 600 - answered, "a foreign target was counted");
}

/// An HTTP/1.1 request without `Host` is a 400 (RFC 9112 §3.2), in origin
/// or absolute form, and counts nothing; HTTP/1.0 needs none, and is judged
/// by its target where that names a host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_host_is_judged_by_its_version() {
    let serve = Serve::start(None, &[], &[]).await;
    let body = r#"{"keys": {"client": "hostless"}}"#;
    let send = |version: &str, target: &str| {
        let head = format!(
            "POST {target} {version}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let addr = serve.addr.clone();
        async move { crate::common::serve::raw(&addr, head.as_bytes()).await }
    };
    for target in [ATTEMPT, "http://127.0.0.1/v1/limits/api/attempt", "http://evil.example/v1/limits/api/attempt"] {
        assert_error(&send("HTTP/1.1", target).await, 400, "missing-host", target);
    }
    assert_eq!(send("HTTP/1.0", ATTEMPT).await.status, 200);
    let foreign = "http://evil.example/v1/limits/api/attempt";
    assert_error(&send("HTTP/1.0", foreign).await, 421, "not-loopback-host", foreign);
    assert_eq!(api_left(&serve, "hostless").await, 599, "only the HTTP/1.0 request on loopback counted");
}

/// Without a token, a `Host` that only looks like a loopback name (a port
/// that is no port, userinfo, a suffix, another spelling of 127.0.0.1) gets
/// 421: a browser sends none of them for a loopback address, it writes
/// `127.1` or `[::ffff:127.0.0.1]` as `127.0.0.1` and `[::ffff:7f00:1]`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_that_only_look_like_loopback_are_misdirected() {
    let serve = Serve::start(None, &[], &[]).await;
    let misdirected = [
        "127.0.0.1:abc",
        "127.0.0.1:99999999999999999999",
        "127.0.0.1:+80",
        "localhost:80:80",
        "[::1]:80:80",
        "[::1]x",
        "user@127.0.0.1",
        "127.0.0.1.evil.example",
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "[::ffff:127.0.0.1]",
        "localhost..",
    ];
    for host in misdirected {
        let r = crate::common::serve::raw(
            &serve.addr,
            &post(ATTEMPT, &format!("host: {host}\r\nconnection: close\r\n"), r#"{"keys": {"client": "host"}}"#),
        )
        .await;
        assert_error(&r, 421, "not-loopback-host", host);
    }
    assert_eq!(api_left(&serve, "host").await, 600);
    for host in ["localhost.", "LOCALHOST:8080", "127.0.0.1:65535", "[0:0:0:0:0:0:0:1]:1", "app.localhost"] {
        let r = crate::common::serve::raw(
            &serve.addr,
            format!("GET /v1/limits HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n").as_bytes(),
        )
        .await;
        assert_eq!(r.status, 200, "{host}: {}", r.body);
    }
}
