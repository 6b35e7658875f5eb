//! Reload applies to the counts already held: after SIGHUP, a raised budget
//! lets a key that spent the old one go on at once, and a lowered one
//! refuses a key at once, on a limit of the site's own (fixed window, a
//! lockout, a sliding window, a GCRA on the memory store's integer path and
//! on the JSON one, in memory and on SQLite) over HTTP on the real binary;
//! a file that can't be used is refused and the running limits stay.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, sqlite_url, SECRET};
use crate::common::serve::{scratch, Serve};
use limit_store::DatabaseStore;

const UPLOADS: &str = "/v1/limits/uploads/attempt";

/// The settings with `user` (a fixed window), `ip` (a lockout) and `device`
/// (a sliding window) at these budgets.
fn settings(user: u64, ip: u64, device: u64) -> String {
    format!(
        "[rate_limit]\nsingle_instance = true\n\n\
         [rate_limit.limits.uploads]\nparts = [\"user\", \"ip\", \"device\"]\nbudget = {user}\nwindow = \"1h\"\n\n\
         [rate_limit.limits.uploads.ip]\nalgorithm = \"lockout\"\nbudget = {ip}\nlock = \"1h\"\nnormalize = \"ip\"\n\n\
         [rate_limit.limits.uploads.device]\nalgorithm = \"sliding-window\"\nbudget = {device}\n"
    )
}

/// `field` of each of `uploads`' parts as `GET /v1/limits` lists them.
async fn of_parts(serve: &Serve, field: &str) -> Vec<u64> {
    let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
    let limits = r.json()["limits"].as_array().unwrap().clone();
    let uploads = limits.iter().find(|l| l["name"] == "uploads").unwrap().clone();
    uploads["parts"].as_array().unwrap().iter().map(|p| p[field].as_u64().unwrap()).collect()
}

/// The budgets of `uploads`' parts.
async fn budgets(serve: &Serve) -> Vec<u64> {
    of_parts(serve, "budget").await
}

/// Writes `text` to `config`, sends SIGHUP, and waits for `expected` budgets.
async fn reload(serve: &Serve, config: &Path, text: &str, expected: &[u64]) {
    std::fs::write(config, text).unwrap();
    serve.signal("HUP");
    let started = Instant::now();
    while budgets(serve).await != expected {
        assert!(started.elapsed() < Duration::from_secs(10), "the budgets did not become {expected:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn attempt(serve: &Serve, user: &str, ip: &str, device: &str) -> (u16, Option<String>) {
    let body = format!(r#"{{"keys": {{"user": "{user}", "ip": "{ip}", "device": "{device}"}}}}"#);
    let r = serve.post(UPLOADS, &body).await;
    (r.status, r.json()["limited_by"].as_str().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_raised_and_lowered_budgets_to_the_counts_held() {
    let dir = scratch("site-reload");
    let (config, log) = (dir.join("limit-store.toml"), dir.join("serve.log"));
    std::fs::write(&config, settings(2, 100, 100)).unwrap();
    let serve = Serve::start_logging(Some(&config), &[], &[], Some(&log)).await;
    let limited_by = |part: &str| (429, Some(part.to_owned()));

    // Fixed window: `ann` spends her 2; raised to 4, she goes on at once
    // for exactly 2 more; lowered to 3, she is refused at once.
    for i in 0..2 {
        assert_eq!(attempt(&serve, "ann", "192.0.2.1", &format!("d{i}")).await.0, 200);
    }
    assert_eq!(attempt(&serve, "ann", "192.0.2.1", "d2").await, limited_by("user"));
    reload(&serve, &config, &settings(4, 100, 100), &[4, 100, 100]).await;
    for i in 3..5 {
        assert_eq!(attempt(&serve, "ann", "192.0.2.1", &format!("d{i}")).await.0, 200, "raised: goes on at once");
    }
    assert_eq!(attempt(&serve, "ann", "192.0.2.1", "d5").await, limited_by("user"));
    // `bea` spends 2 of the 4, then the budget is lowered to 2: refused at once.
    for i in 0..2 {
        assert_eq!(attempt(&serve, "bea", "192.0.2.2", &format!("e{i}")).await.0, 200);
    }
    reload(&serve, &config, &settings(2, 100, 100), &[2, 100, 100]).await;
    assert_eq!(attempt(&serve, "bea", "192.0.2.2", "e2").await, limited_by("user"), "lowered: refused at once");

    // Lockout: the address spends 3 of 3 and is locked; raised to 5, two more
    // go through at once; lowered to 1, an address that spent 2 is refused.
    reload(&serve, &config, &settings(100, 3, 100), &[100, 3, 100]).await;
    for i in 0..3 {
        assert_eq!(attempt(&serve, &format!("u{i}"), "198.51.100.1", &format!("f{i}")).await.0, 200);
    }
    assert_eq!(attempt(&serve, "u3", "198.51.100.1", "f3").await, limited_by("ip"));
    for i in 0..2 {
        assert_eq!(attempt(&serve, &format!("v{i}"), "198.51.100.2", &format!("g{i}")).await.0, 200);
    }
    reload(&serve, &config, &settings(100, 5, 100), &[100, 5, 100]).await;
    for i in 4..6 {
        assert_eq!(attempt(&serve, &format!("u{i}"), "198.51.100.1", &format!("f{i}")).await.0, 200, "raised lockout");
    }
    assert_eq!(attempt(&serve, "u6", "198.51.100.1", "f6").await, limited_by("ip"));
    reload(&serve, &config, &settings(100, 1, 100), &[100, 1, 100]).await;
    assert_eq!(attempt(&serve, "v2", "198.51.100.2", "g2").await, limited_by("ip"), "lowered lockout");

    // Sliding window: both directions on the attempts it holds.
    reload(&serve, &config, &settings(100, 100, 2), &[100, 100, 2]).await;
    for i in 0..2 {
        assert_eq!(attempt(&serve, &format!("w{i}"), "203.0.113.1", "phone").await.0, 200);
    }
    assert_eq!(attempt(&serve, "w2", "203.0.113.1", "phone").await, limited_by("device"));
    reload(&serve, &config, &settings(100, 100, 3), &[100, 100, 3]).await;
    assert_eq!(attempt(&serve, "w3", "203.0.113.1", "phone").await.0, 200, "raised sliding window");
    reload(&serve, &config, &settings(100, 100, 1), &[100, 100, 1]).await;
    assert_eq!(attempt(&serve, "w4", "203.0.113.2", "phone").await, limited_by("device"), "lowered sliding");

    // A bad table is refused, with its line, and the running limits stay.
    std::fs::write(&config, settings(100, 100, 1).replace("algorithm = \"lockout\"", "algorithm = \"lockdown\""))
        .unwrap();
    serve.signal("HUP");
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("limit-store-config-refused") {
            assert!(text.contains("line 10") && text.contains("not an algorithm"), "{text}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no refusal logged: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(budgets(&serve).await, [100, 100, 1], "the running limits stay");
    drop(serve);
    let _ = std::fs::remove_dir_all(dir);
}

/// A limit of two parts whose windows the file sets: `user` a fixed window
/// of 2, `device` a sliding window of 2.
fn windows(user: &str, device: &str) -> String {
    format!(
        "[rate_limit]\nsingle_instance = true\n\n\
         [rate_limit.limits.uploads]\nparts = [\"user\", \"device\"]\nbudget = 2\nwindow = \"{user}\"\n\n\
         [rate_limit.limits.uploads.device]\nalgorithm = \"sliding-window\"\nbudget = 2\nwindow = \"{device}\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_counts_when_a_window_changes() {
    let dir = scratch("site-reload-windows");
    let config = dir.join("limit-store.toml");
    std::fs::write(&config, windows("1h", "1h")).unwrap();
    let serve = Serve::start(Some(&config), &[], &[]).await;
    let serve = &serve;
    let post = |user: &str, device: &str| {
        let body = format!(r#"{{"keys": {{"user": "{user}", "device": "{device}"}}}}"#);
        async move { serve.post(UPLOADS, &body).await }
    };
    // `ann` spends her fixed window's 2; the device `tab` its sliding 2.
    for i in 0..2 {
        assert_eq!(post("ann", &format!("d{i}")).await.status, 200);
        assert_eq!(post(&format!("u{i}"), "tab").await.status, 200);
    }
    // Both windows lengthened to a day, then shortened to a second: no count
    // is lost by either change.
    for (text, expected) in [(windows("1d", "1d"), [86_400_000, 86_400_000]), (windows("1s", "1s"), [1_000, 1_000])] {
        std::fs::write(&config, text).unwrap();
        serve.signal("HUP");
        let started = Instant::now();
        while of_parts(serve, "window_ms").await != expected {
            assert!(started.elapsed() < Duration::from_secs(10), "the windows did not become {expected:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(post("ann", "d9").await.status, 429, "the fixed window's count is kept");
        assert_eq!(post("u9", "tab").await.status, 429, "the sliding window's attempts are kept");
    }
    // The sliding window counts the attempts it holds over its new window of
    // a second at once: a second on, they have left it.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let r = post("u9", "tab").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let _ = std::fs::remove_dir_all(dir);
}

/// Two GCRA limits at `budget` per `window` after `store` (the settings'
/// `[rate_limit]` lines): `plans`, of one part (on the memory store, counted
/// on its integer), and `tokens`, of two (counted through the store's JSON
/// path), whose `org` has budget to spare.
fn gcra(store: &str, budget: u64, window: &str) -> String {
    format!(
        "[rate_limit]\n{store}\n\n\
         [rate_limit.limits.plans]\nparts = [\"client\"]\nalgorithm = \"gcra\"\nbudget = {budget}\nwindow = \"{window}\"\n\n\
         [rate_limit.limits.tokens]\nparts = [\"user\", \"org\"]\nalgorithm = \"gcra\"\nbudget = {budget}\nwindow = \"{window}\"\n\n\
         [rate_limit.limits.tokens.org]\nbudget = 1000\n"
    )
}

/// Writes `text` to `config`, sends SIGHUP, and waits until `plans` and
/// `tokens`' first part count `budget` per `window_ms`.
async fn reload_gcra(serve: &Serve, config: &Path, text: &str, budget: u64, window_ms: u64) {
    std::fs::write(config, text).unwrap();
    serve.signal("HUP");
    let started = Instant::now();
    loop {
        let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
        let limits = r.json()["limits"].as_array().unwrap().clone();
        let now: Vec<_> = ["plans", "tokens"]
            .iter()
            .map(|name| {
                let limit = limits.iter().find(|l| l["name"] == *name).unwrap();
                (limit["parts"][0]["budget"].as_u64().unwrap(), limit["parts"][0]["window_ms"].as_u64().unwrap())
            })
            .collect();
        if now == [(budget, window_ms); 2] {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the limits did not become {budget} per {window_ms}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` attempts of `key` on both limits: how many each allowed.
async fn gcra_attempts(serve: &Serve, key: &str, n: usize) -> [usize; 2] {
    let mut allowed = [0; 2];
    for _ in 0..n {
        for (i, (limit, body)) in [
            ("plans", format!(r#"{{"keys": {{"client": "{key}"}}}}"#)),
            ("tokens", format!(r#"{{"keys": {{"user": "{key}", "org": "acme"}}}}"#)),
        ]
        .into_iter()
        .enumerate()
        {
            let r = serve.post(&format!("/v1/limits/{limit}/attempt"), &body).await;
            assert!(r.status == 200 || r.status == 429, "{limit}: {} {}", r.status, r.body);
            allowed[i] += usize::from(r.status == 200);
        }
    }
    allowed
}

/// A GCRA's reload in both directions, and of its window, on `store`.
async fn a_reload_applies_to_what_a_gcra_holds(what: &str, store: &str, env: &[(&str, &str)]) {
    let dir = scratch(&format!("site-reload-gcra-{what}"));
    let config = dir.join("limit-store.toml");
    std::fs::write(&config, gcra(store, 3, "1h")).unwrap();
    let serve = Serve::start(Some(&config), env, &[]).await;
    // `ann` spends her 3; raised to 6, she goes on at once for exactly 3 more.
    assert_eq!(gcra_attempts(&serve, "ann", 4).await, [3, 3], "{what}");
    reload_gcra(&serve, &config, &gcra(store, 6, "1h"), 6, 3_600_000).await;
    assert_eq!(gcra_attempts(&serve, "ann", 5).await, [3, 3], "{what}: raised: goes on at once for the difference");
    // `bea` spends 2 of the 6; lowered to 2, she is refused at once.
    assert_eq!(gcra_attempts(&serve, "bea", 2).await, [2, 2], "{what}");
    reload_gcra(&serve, &config, &gcra(store, 2, "1h"), 2, 3_600_000).await;
    assert_eq!(gcra_attempts(&serve, "bea", 1).await, [0, 0], "{what}: lowered: refused at once");
    // `cy` spends 2 of 2 an hour; a day keeps them, and so does a second,
    // over which they then refill.
    assert_eq!(gcra_attempts(&serve, "cy", 3).await, [2, 2], "{what}");
    reload_gcra(&serve, &config, &gcra(store, 2, "1d"), 2, 86_400_000).await;
    assert_eq!(gcra_attempts(&serve, "cy", 1).await, [0, 0], "{what}: a longer window keeps the count");
    reload_gcra(&serve, &config, &gcra(store, 2, "1s"), 2, 1_000).await;
    assert_eq!(gcra_attempts(&serve, "cy", 1).await, [0, 0], "{what}: a shorter window keeps the count");
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert_eq!(gcra_attempts(&serve, "cy", 1).await, [1, 1], "{what}: refilled over the new window");
    drop(serve);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_to_what_a_gcra_holds_in_memory() {
    a_reload_applies_to_what_a_gcra_holds("memory", "single_instance = true", &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_to_what_a_gcra_holds_on_sqlite() {
    let (url, table) = (sqlite_url("site-reload-gcra"), format!("ls_gcra_{}", rand_suffix() % 1_000_000_000));
    DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    let store = format!("store = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"");
    a_reload_applies_to_what_a_gcra_holds("sqlite", &store, &[("LIMIT_STORE_SECRET", SECRET)]).await;
}
