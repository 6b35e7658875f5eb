//! Several OS processes, each with a pool (or a Redis connection) of its own,
//! hammer one key with a budget on one store: exactly the budget is granted in
//! total, never one more or less. On PostgreSQL, MySQL and Redis one process
//! runs with its clock ten minutes ahead (under `faketime`): counting on the
//! server's clock, it still agrees with the others on when the window ends.
//!
//! SQLite has no server: each process counts on its own clock. One ten
//! minutes ahead sees a window the others opened as over and opens another, so
//! the test there shows the bound that holds: at most one more window's budget.

use std::process::{Command, Stdio};
use std::sync::Arc;

use crate::common::db::{server, sqlite_url, SECRET};
use limit_store::clock::Clock;
use limit_store::{update_with, DatabaseStore, Entry, LimitStore, RedisStore, Write};
use serde_json::json;

const BUDGET: u64 = 60;
const WORKERS: usize = 4;
const ATTEMPTS: u64 = 40; // per worker: 160 in all, well over the budget
const WINDOW_MS: i64 = 60_000;

/// One worker process's part; a no-op unless the parent test started it.
#[test]
fn worker() {
    let Ok(url) = std::env::var("LIMIT_STORE_EXACTNESS_URL") else {
        return;
    };
    let table = std::env::var("LIMIT_STORE_EXACTNESS_TABLE").unwrap();
    let key = std::env::var("LIMIT_STORE_EXACTNESS_KEY").unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let granted = runtime.block_on(async {
        let store: Arc<dyn LimitStore> = if url.starts_with("redis") {
            Arc::new(RedisStore::builder(&url).secret(SECRET).sweep_every(None).connect().await.unwrap())
        } else {
            Arc::new(
                DatabaseStore::builder(&url)
                    .table(&table)
                    .secret(SECRET)
                    .max_connections(4)
                    .sweep_every(None)
                    .connect()
                    .await
                    .unwrap(),
            )
        };
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (store, key) = (store.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let mut granted = 0u64;
                for _ in 0..ATTEMPTS / 4 {
                    let allowed = update_with(&*store, &[&key], |current, now| {
                        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
                        let expires_at = current[0].as_ref().map_or(now + WINDOW_MS, |e| e.expires_at);
                        if n >= BUDGET {
                            return (vec![Write::Keep], false);
                        }
                        (vec![Write::Put(Entry { value: json!({ "n": n + 1 }), expires_at })], true)
                    })
                    .await
                    .expect("every count is answered");
                    granted += u64::from(allowed);
                }
                granted
            }));
        }
        let mut granted = 0;
        for task in tasks {
            granted += task.await.unwrap();
        }
        granted
    });
    println!("granted {granted}");
}

/// [`worker`]'s name as the test binary lists it: its module path without
/// the binary's own name, whichever binary this file is part of.
fn worker_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    if module.is_empty() {
        "worker".to_owned()
    } else {
        format!("{module}::worker")
    }
}

fn faketime() -> Option<&'static str> {
    let found = Command::new("faketime").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok();
    if !found {
        eprintln!(
            "faketime is not installed: the shifted-clock worker runs on the true clock (.ci/run installs faketime)"
        );
    }
    found.then_some("faketime")
}

/// What the worker processes were granted in all, and the key's entry after.
struct Counted {
    granted: u64,
    entry: Entry,
    /// The system clock when the workers started and when they were done.
    started: i64,
    ended: i64,
}

async fn exactly_the_budget(url: &str, shift_one_clock: bool) {
    let Counted { granted, entry, started, ended } = count_across_processes(url, shift_one_clock).await;
    assert_eq!(granted, BUDGET, "{url}: processes were granted {granted} attempts on a budget of {BUDGET}");
    assert_eq!(entry.value, json!({ "n": BUDGET }));
    // The window was opened on the server's clock (this machine's, here),
    // not on the shifted worker's, ten minutes ahead.
    let expires_at = entry.expires_at;
    assert!(
        (started + WINDOW_MS - 1_000..=ended + WINDOW_MS + 1_000).contains(&expires_at),
        "{url}: the window ends at {expires_at}, not {WINDOW_MS} ms after the test ran ({started}..{ended})"
    );
}

async fn count_across_processes(url: &str, shift_one_clock: bool) -> Counted {
    let table = "limit_store_exactness";
    let redis = url.starts_with("redis");
    if !redis {
        DatabaseStore::builder(url).table(table).migrate().await.unwrap();
    }
    let started = limit_store::clock::SystemClock.now();
    let key = format!("exactness:{}", crate::common::db::rand_suffix());
    let exe = std::env::current_exe().unwrap();
    let mut children = Vec::new();
    for i in 0..WORKERS {
        let shifted = shift_one_clock && i == 0;
        let mut command = match (shifted, faketime()) {
            (true, Some(faketime)) => {
                let mut c = Command::new(faketime);
                c.arg("-f").arg("+600s").arg(&exe);
                c
            }
            _ => Command::new(&exe),
        };
        command
            .args(["--exact", &worker_name(), "--nocapture", "--test-threads=1"])
            .env("LIMIT_STORE_EXACTNESS_URL", url)
            .env("LIMIT_STORE_EXACTNESS_TABLE", table)
            .env("LIMIT_STORE_EXACTNESS_KEY", &key)
            .stdout(Stdio::piped());
        children.push(command.spawn().expect("start a worker process"));
    }
    let mut granted = 0u64;
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a worker failed: {}", String::from_utf8_lossy(&out.stdout));
        let text = String::from_utf8(out.stdout).unwrap();
        // The harness may print "test worker ... " on the same line first.
        let line = text
            .lines()
            .find_map(|l| l.split("granted ").nth(1))
            .unwrap_or_else(|| panic!("the worker reports what it was granted:\n{text}"));
        granted += line.split_whitespace().next().unwrap().parse::<u64>().unwrap();
    }
    let store: Arc<dyn LimitStore> = if redis {
        Arc::new(RedisStore::builder(url).secret(SECRET).sweep_every(None).connect().await.unwrap())
    } else {
        Arc::new(DatabaseStore::builder(url).table(table).secret(SECRET).sweep_every(None).connect().await.unwrap())
    };
    let ended = limit_store::clock::SystemClock.now();
    let entry = store.read(&[&key]).await.unwrap()[0].clone().expect("the key holds the count");
    Counted { granted, entry, started, ended }
}

#[tokio::test]
async fn exactly_the_budget_across_processes_on_sqlite() {
    exactly_the_budget(&sqlite_url("exactness"), false).await;
}

#[tokio::test]
async fn one_process_ten_minutes_ahead_on_sqlite_opens_at_most_one_more_window() {
    let url = sqlite_url("exactness-shifted");
    let Counted { granted, entry, started, ended } = count_across_processes(&url, true).await;
    assert!((BUDGET..=2 * BUDGET).contains(&granted), "{url}: {granted} granted on a budget of {BUDGET}");
    let n = entry.value["n"].as_u64().unwrap();
    assert!((1..=BUDGET).contains(&n), "{url}: the last window counted {n}");
    // The window that holds the key was opened on one of the two clocks.
    let opened_on = |shift: i64| started + shift + WINDOW_MS - 1_000..=ended + shift + WINDOW_MS + 1_000;
    assert!(
        opened_on(0).contains(&entry.expires_at) || opened_on(600_000).contains(&entry.expires_at),
        "{url}: the window ends at {}, on neither clock ({started}..{ended})",
        entry.expires_at
    );
}

#[tokio::test]
async fn exactly_the_budget_across_processes_on_postgres() {
    if let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") {
        exactly_the_budget(&url, true).await;
    }
}

#[tokio::test]
async fn exactly_the_budget_across_processes_on_mysql() {
    if let Some(url) = server("LIMIT_STORE_TEST_MYSQL") {
        exactly_the_budget(&url, true).await;
    }
}

#[tokio::test]
async fn exactly_the_budget_across_processes_on_redis() {
    if let Some(url) = server("LIMIT_STORE_TEST_REDIS") {
        exactly_the_budget(&url, true).await;
    }
}
