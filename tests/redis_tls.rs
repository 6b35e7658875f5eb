//! TLS, verified against the trusted roots, on every URL form: `rediss://`
//! to one server, `rediss+cluster://` (`redis_tls/cluster.rs`) and
//! `rediss+sentinel://` (`redis_tls/sentinel.rs`), each on servers of the
//! test's own that speak TLS only, with certificates from a CA made for the
//! test and trusted through `SSL_CERT_FILE` (read by the TLS stack's root
//! store); and a certificate from a CA the client does not trust, refused
//! on each form. Its own test binary, because it sets that variable for the
//! whole process (once, before any test connects: `redis_tls/setup.rs`).

#[path = "redis_tls/cluster.rs"]
mod cluster;
mod common;
#[path = "redis_tls/sentinel.rs"]
mod sentinel;
#[path = "redis_tls/setup.rs"]
mod setup;

use common::redis::{OwnRedis, SECRET};
use limit_store::{update_with, Entry, LimitStore, RedisStore, StoreError, Write};
use serde_json::json;
use setup::{certs, chain};

#[tokio::test]
async fn rediss_urls_speak_verified_tls() {
    let Some(certs) = certs() else { return };
    let Some(own) = OwnRedis::start_tls(&certs.trusted) else { return };
    let store = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap();
    for want in 1..=3u64 {
        let n = update_with(&store, &["k"], |current, now| {
            let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
            (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + 60_000 })], n)
        })
        .await
        .unwrap();
        assert_eq!(n, want);
    }
    assert_eq!(store.read(&["k"]).await.unwrap()[0].as_ref().unwrap().value, json!({"n": 3}));

    // Plain redis:// to a TLS-only port is not silently accepted.
    let plain = own.url().replace("rediss://", "redis://");
    assert!(RedisStore::builder(&plain).secret(SECRET).connect().await.is_err());
}

/// A server whose certificate comes from a CA the client does not trust is
/// refused on every TLS form, with a setup error that says why, and never
/// spoken to in plain text instead.
#[tokio::test]
async fn untrusted_certificates_are_refused_on_every_form() {
    let Some(certs) = certs() else { return };
    let Some(stranger) = OwnRedis::start_tls(&certs.stranger) else { return };
    let host_port = stranger.url().replace("rediss://", "");
    for url in [
        format!("rediss://{host_port}"),
        format!("rediss+cluster://{host_port}"),
        format!("rediss+sentinel://{host_port}/limit-store"),
    ] {
        let err = RedisStore::builder(&url).secret(SECRET).connect().await.unwrap_err();
        let text = chain(&err);
        assert!(matches!(err, StoreError::Setup { .. }), "{url}: {text}");
        assert!(text.contains("invalid peer certificate: UnknownIssuer"), "{url}: {text}");
    }
    // The server saw TLS handshakes only: no plain command reached it.
    let calls = stranger_calls(&certs.stranger, &host_port);
    assert!(!calls.contains("cmdstat_"), "a command reached the server: {calls}");
}

/// The stranger's command counts (`INFO commandstats`), asked over TLS
/// trusting its own CA: empty when no client ran a command.
fn stranger_calls(dir: &std::path::Path, host_port: &str) -> String {
    let port = host_port.rsplit(':').next().unwrap();
    let out = std::process::Command::new("redis-cli")
        .args(["--tls", "--cacert", &dir.join("ca.pem").display().to_string(), "-p", port])
        .args(["INFO", "commandstats"])
        .output()
        .expect("run redis-cli");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // This INFO call is the first command; it counts itself only afterwards.
    text.lines().filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:")).collect()
}
