//! `serve` reloads the limits' settings on SIGHUP, keeping the counts it
//! holds and what each limit answered so far; a changed file that can't be
//! used is refused with its line, and the running settings stay. With no
//! settings file, SIGHUP has nothing to reload and `serve` keeps serving.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::serve::{scratch, Serve};

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";
const BODY: &str = r#"{"keys": {"account": "reload@example.com", "ip": "192.0.2.60"}}"#;

async fn sign_in_budget(serve: &Serve) -> u64 {
    let r = serve.request("GET", "/v1/limits", &[], b"").await.unwrap();
    let limits = r.json()["limits"].as_array().unwrap().clone();
    limits.iter().find(|l| l["name"] == "sign-in").unwrap()["parts"][0]["budget"].as_u64().unwrap()
}

async fn wait_for_budget(serve: &Serve, budget: u64) {
    let started = Instant::now();
    while sign_in_budget(serve).await != budget {
        assert!(started.elapsed() < Duration::from_secs(10), "the budget did not become {budget}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn hangup(serve: &Serve) {
    assert!(Command::new("kill").args(["-HUP", &serve.child.id().to_string()]).status().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_budgets_and_keeps_counts_and_refuses_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("limit-store-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (config, log) = (dir.join("limit-store.toml"), dir.join("serve.log"));
    std::fs::write(&config, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.sign-in]\nbudget = 2\n")
        .unwrap();
    let serve = Serve::start_logging(Some(&config), &[], &[], Some(&log)).await;
    assert_eq!(sign_in_budget(&serve).await, 2);
    assert_eq!(serve.post(SIGN_IN, BODY).await.json()["remaining"], 1);

    std::fs::write(&config, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.sign-in]\nbudget = 4\n")
        .unwrap();
    hangup(&serve);
    wait_for_budget(&serve, 4).await;
    assert_eq!(
        serve.post(SIGN_IN, BODY).await.json()["remaining"],
        2,
        "the attempt made before the reload still counts"
    );

    std::fs::write(&config, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.sign-in]\nbudget = \"many\"\n")
        .unwrap();
    hangup(&serve);
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("limit-store-config-refused") {
            assert!(text.contains("line 5"), "the error names the line: {text}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no refusal logged: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(sign_in_budget(&serve).await, 4, "the running settings stay");
    assert_eq!(serve.post(SIGN_IN, BODY).await.json()["remaining"], 1);
    drop(serve);
    let _ = std::fs::remove_dir_all(dir);
}

/// The `allowed` and `limited` columns of `limit` on the status page.
async fn answered(serve: &Serve, limit: &str) -> (u64, u64) {
    let page = serve.request("GET", "/", &[], b"").await.unwrap().body;
    let row = page.split(&format!("<tr data-limit=\"{limit}\">")).nth(1).unwrap();
    let cell = |class: &str| -> u64 {
        let start = format!("<td class=\"{class}\">");
        row.split(&start).nth(1).and_then(|rest| rest.split('<').next()).unwrap().parse().unwrap()
    };
    (cell("allowed"), cell("limited"))
}

/// Waits for a line of `kind` in `log`, and answers the log.
async fn logged(log: &std::path::Path, kind: &str) -> String {
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(kind) {
            return text;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no {kind} logged: {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_a_settings_file_keeps_serving_and_its_lockouts() {
    let dir = scratch("hup-no-file");
    let log = dir.join("serve.log");
    let mut serve = Serve::start_logging(None, &[], &[], Some(&log)).await;
    let body = r#"{"keys": {"account": "hup@example.com", "ip": "192.0.2.61"}}"#;
    for _ in 0..5 {
        assert_eq!(serve.post(SIGN_IN, body).await.status, 200);
    }
    assert_eq!(serve.post(SIGN_IN, body).await.status, 429);
    hangup(&serve);
    let text = logged(&log, "limit-store-config-not-reloaded").await;
    assert_eq!(text.matches("limit-store-config-not-reloaded").count(), 1, "one line: {text}");
    assert!(serve.exit_within(Duration::from_millis(200)).await.is_none(), "serve ended on SIGHUP");
    assert_eq!(serve.post(SIGN_IN, body).await.status, 429, "the lockout held in memory is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_what_each_limit_answered() {
    let dir = scratch("reload-counters");
    let config = dir.join("limit-store.toml");
    std::fs::write(&config, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.sign-in]\nbudget = 2\n")
        .unwrap();
    let serve = Serve::start(Some(&config), &[], &[]).await;
    let body = r#"{"keys": {"account": "tally@example.com", "ip": "192.0.2.62"}}"#;
    for _ in 0..3 {
        serve.post(SIGN_IN, body).await;
    }
    assert_eq!(answered(&serve, "sign-in").await, (2, 1));
    std::fs::write(&config, "[rate_limit]\nsingle_instance = true\n\n[rate_limit.limits.sign-in]\nbudget = 4\n")
        .unwrap();
    hangup(&serve);
    wait_for_budget(&serve, 4).await;
    assert_eq!(answered(&serve, "sign-in").await, (2, 1), "the reload kept the counters");
    serve.post(SIGN_IN, body).await;
    assert_eq!(answered(&serve, "sign-in").await, (3, 1));
}
