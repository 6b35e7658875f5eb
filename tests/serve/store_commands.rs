//! `limit-store migrate`, `stats` and `sweep`, the real binary, on a SQLite
//! file and on the shared Redis: each says what the store holds, counted by
//! the library beside it, and a wrong secret or a server that isn't there is
//! one clear line on stderr and a failing exit, never a panic.

use std::process::Output;
use std::sync::Arc;

use limit_store::{DatabaseStore, Limits, RedisStore};

use crate::common::serve::{limit_store, scratch};

/// A secret of this run's own, so that its entries are a generation of their own.
fn secret(label: &str) -> String {
    format!("limit-store store-command tests, {label} {}", crate::common::rand_suffix())
}

/// `limit-store ARGS`: its stdout, after checking it succeeded.
fn ok(args: &[&str]) -> String {
    let out = limit_store().args(args).output().unwrap();
    let (stdout, stderr) = texts(&out);
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    stdout
}

fn texts(out: &Output) -> (String, String) {
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Counts `n` clients once each on the `api` limit of `store`.
async fn count(store: Arc<dyn limit_store::LimitStore>, n: usize) {
    let limits = Limits::builder().store(store).build().unwrap();
    for i in 0..n {
        assert!(limits.attempt("api", &[("client", &format!("client-{i}"))]).await.unwrap().allowed);
    }
}

#[tokio::test]
async fn migrate_stats_and_sweep_on_a_sqlite_file() {
    let file = scratch("store-commands").join("limits.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let secret = secret("sqlite");
    assert!(ok(&["migrate", "--database-url", &url]).contains("limit_store"));
    let stats = ok(&["stats", "--database-url", &url, "--secret", &secret]);
    assert!(stats.contains("live entries:  0 of 1000000"), "{stats}");

    let store = DatabaseStore::builder(&url).secret(&secret).connect().await.unwrap();
    count(Arc::new(store), 3).await;
    let stats = ok(&["stats", "--database-url", &url, "--secret", &secret, "--max-entries", "300"]);
    assert!(stats.contains("live entries:  3 of 300 (1.0% full)"), "{stats}");
    let swept = ok(&["sweep", "--database-url", &url, "--secret", &secret]);
    assert!(swept.contains("removed 0 expired entries"), "live entries stay: {swept}");
    assert!(ok(&["stats", "--database-url", &url, "--secret", &secret]).contains("live entries:  3 of"));
}

#[tokio::test]
async fn stats_on_redis_counts_this_secrets_entries() {
    let Some(url) = crate::common::server("LIMIT_STORE_TEST_REDIS") else { return };
    let secret = secret("redis");
    let store = RedisStore::builder(&url).secret(&secret).connect().await.unwrap();
    count(Arc::new(store), 2).await;
    let stats = ok(&["stats", "--redis-url", &url, "--secret", &secret]);
    assert!(stats.contains("live entries:  2 of"), "only this secret's generation: {stats}");
    assert!(stats.contains("eviction:") || stats.contains("WARNING"), "{stats}");
}

/// A short secret, and a Redis or a PostgreSQL that isn't there: one line that says what to
/// do (or what failed, said once), exit code 1, no panic.
#[test]
fn a_short_secret_or_no_server_is_one_clear_line() {
    let file = scratch("store-commands-bad").join("limits.db");
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let port = crate::common::serve::free_port();
    let redis = format!("redis://127.0.0.1:{port}");
    let postgres = format!("postgres://root@127.0.0.1:{port}/test");
    let long = "a secret of 32 bytes or more, long enough";
    for args in [
        vec!["stats", "--database-url", &url, "--secret", "short"],
        vec!["sweep", "--redis-url", &redis, "--secret", long],
        vec!["stats", "--database-url", &postgres, "--secret", long],
    ] {
        let out = limit_store().args(&args).output().unwrap();
        let (stdout, stderr) = texts(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}\n{stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
        let line = stderr.lines().find(|l| l.starts_with("limit-store: ")).expect("the error's line");
        if args.contains(&"short") {
            assert!(line.contains("at least 32 bytes") && line.contains("LIMIT_STORE_SECRET"), "{line}");
        } else {
            let server = if args.contains(&redis.as_str()) { "can't reach Redis" } else { "PostgreSQL" };
            assert!(line.contains(server), "{line}");
            assert_eq!(line.matches("Connection refused").count(), 1, "the cause said once: {line}");
        }
    }
}
