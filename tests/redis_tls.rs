//! `rediss://` speaks TLS, verified against the trusted roots: a server of
//! the test's own with a certificate from a CA made for the test, trusted
//! through `SSL_CERT_FILE` (read by the TLS stack's root store). Its own test
//! binary, because it sets that variable for the whole process.

mod common;

use std::process::Command;

use common::redis::{OwnRedis, SECRET};
use limit_store::{update_with, Entry, LimitStore, RedisStore, Write};
use serde_json::json;

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let status = Command::new("openssl").current_dir(dir).args(args).output().expect("run openssl");
    assert!(status.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&status.stderr));
}

/// A CA, and a certificate for 127.0.0.1 signed by it, in `dir`.
fn certificates(dir: &std::path::Path) {
    std::fs::write(dir.join("san.ext"), "subjectAltName = IP:127.0.0.1, DNS:localhost\n").unwrap();
    openssl(dir, &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem"]);
    openssl(dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr"]);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

#[tokio::test]
async fn rediss_urls_speak_verified_tls() {
    if Command::new("openssl").arg("version").output().is_err() {
        eprintln!("skipped: openssl is not installed");
        return;
    }
    let dir = std::env::temp_dir().join(format!("limit-store-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Subjects for the two requests, without a prompt.
    std::fs::write(
        dir.join("openssl.cnf"),
        "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = limit-store test\n",
    )
    .unwrap();
    std::env::set_var("OPENSSL_CONF", dir.join("openssl.cnf"));
    certificates(&dir);
    let Some(own) = OwnRedis::start_tls(&dir) else { return };

    // Not trusted yet: the connection is refused, with a setup error.
    let untrusted = RedisStore::builder(&own.url()).secret(SECRET).connect().await.unwrap_err();
    assert!(matches!(untrusted, limit_store::StoreError::Setup { .. }), "{untrusted}");

    std::env::set_var("SSL_CERT_FILE", dir.join("ca.pem"));
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
    let _ = std::fs::remove_dir_all(&dir);
}
