//! The API token: a blank one, or one shorter than 16 bytes, is refused at
//! start with a message that says what to set, from a file or from the
//! environment, so `serve` never listens beyond loopback with a token that
//! anyone can send (the empty one), and a request without `Authorization`
//! never passes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::serve::{free_port, limit_store, request, scratch, Serve};

/// Where the token comes from.
enum From {
    File(&'static str),
    Env(&'static str),
}

/// Starts `serve` beyond loopback with the token `from`; if it is still
/// running after 5 s, sends what an attacker would (a reset with no
/// `Authorization`) and answers its status as the error.
async fn refused(from: &From) -> Result<String, String> {
    let dir = scratch("token");
    let port = free_port();
    let mut command = limit_store();
    command.args(["serve", "--listen", &format!("0.0.0.0:{port}")]);
    command.env_remove("LIMIT_STORE_API_TOKEN").stdout(Stdio::null()).stderr(Stdio::piped());
    match from {
        From::File(text) => {
            let file = dir.join("token");
            std::fs::write(&file, text).unwrap();
            command.arg("--token-file").arg(file);
        }
        From::Env(text) => {
            command.env("LIMIT_STORE_API_TOKEN", text);
        }
    }
    let mut child = command.spawn().unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            assert!(!out.status.success(), "a refusal exits non-zero");
            return Ok(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let reset = request(
        &format!("127.0.0.1:{port}"),
        "POST",
        "/v1/limits/sign-in/reset",
        &[("content-type", "application/json")],
        br#"{"keys": {"account": "victim@example.com"}}"#,
    )
    .await
    .map(|r| r.status);
    let _ = child.kill();
    let _ = child.wait();
    Err(format!("serve listened on 0.0.0.0; a reset with no Authorization answered {reset:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_or_short_token_is_refused_at_start() {
    let cases = [
        (From::File(""), "blank"),
        (From::File(" \n\t \n"), "blank"),
        (From::File("fifteen-bytes!!\n"), "15 bytes"),
        (From::Env(""), "blank"),
        (From::Env("   "), "blank"),
        (From::Env("fifteen-bytes!!"), "15 bytes"),
    ];
    for (from, why) in &cases {
        let case = match from {
            From::File(t) => format!("--token-file holding {t:?}"),
            From::Env(t) => format!("LIMIT_STORE_API_TOKEN={t:?}"),
        };
        let err = refused(from).await.unwrap_or_else(|attack| panic!("{case}: {attack}"));
        assert!(err.contains(why), "{case}: the message says why: {err}");
        assert!(
            err.contains("LIMIT_STORE_API_TOKEN") && err.contains("--token-file") && err.contains("16 bytes"),
            "{case}: the message says what to set: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_of_16_bytes_and_a_newline_is_the_token() {
    let dir = scratch("token-file");
    let file = dir.join("token");
    std::fs::write(&file, "sixteen-bytes-ok\n").unwrap();
    let serve = Serve::start(None, &[], &["--token-file", file.to_str().unwrap()]).await;
    let json = ("content-type", "application/json");
    let body = br#"{"keys": {"account": "file@example.com", "ip": "192.0.2.8"}}"#;
    let r = serve.request("POST", "/v1/limits/sign-in/attempt", &[json], body).await.unwrap();
    assert_eq!((r.status, r.json()["kind"].as_str()), (401, Some("unauthorized")));
    let auth = ("authorization", "Bearer sixteen-bytes-ok");
    let r = serve.request("POST", "/v1/limits/sign-in/attempt", &[json, auth], body).await.unwrap();
    assert_eq!(r.status, 200, "{}", r.body);
}
