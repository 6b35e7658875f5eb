//! What a newcomer meets on a first run of the real binary: the lines
//! `serve` logs as it starts and stops each carry a `kind`, and a store it
//! can't open is one line that says what to do, said once, naming only
//! settings and flags the command has.

use std::time::Duration;

use crate::common::db::SECRET;
use crate::common::serve::{free_port, limit_store, scratch, settings_file, Serve};

/// `limit-store ARGS` with `env`, expected to fail: its `limit-store: ` line.
fn failure(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut command = limit_store();
    command.args(args);
    for var in
        ["LIMIT_STORE_SECRET", "LIMIT_STORE_API_TOKEN", "LIMIT_STORE_DATABASE_URL", "LIMIT_STORE_REDIS_URL", "RUST_LOG"]
    {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    stderr.lines().find(|l| l.starts_with("limit-store: ")).expect("the error's line").to_owned()
}

fn serve_args(config: &std::path::Path) -> Vec<String> {
    let listen = format!("127.0.0.1:{}", free_port());
    vec!["serve".into(), "--listen".into(), listen, "--config".into(), config.to_str().unwrap().into()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_of_a_start_and_a_stop_carries_a_kind() {
    let dir = scratch("first-run-kinds");
    let (log, rules) = (dir.join("serve.log"), dir.join("rules.yaml"));
    std::fs::write(
        &rules,
        "domain: site\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 100 }\n",
    )
    .unwrap();
    let toml = format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{}\"\n", rules.display());
    let config = settings_file(&toml);
    let grpc = format!("127.0.0.1:{}", free_port());
    let args = ["--grpc-listen", &grpc, "--log-format", "json"];
    let mut serve = Serve::start_logging(Some(&config), &[], &args, Some(&log)).await;
    serve.signal("TERM");
    let status = serve.exit_within(Duration::from_secs(15)).await.expect("serve exits on SIGTERM");
    assert!(status.success(), "{status}");
    let text = std::fs::read_to_string(&log).unwrap();
    let kinds: Vec<String> = text
        .lines()
        .map(|line| {
            let line_json: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let kind = line_json["fields"]["kind"].as_str();
            kind.unwrap_or_else(|| panic!("a line without a kind: {line}")).to_owned()
        })
        .collect();
    for kind in ["limit-store-envoy-loaded", "limit-store-listening", "limit-store-draining", "limit-store-stopped"] {
        assert!(kinds.iter().any(|k| k == kind), "no {kind} in {kinds:?}");
    }
    let listening = text.lines().filter(|l| l.contains("limit-store-listening")).count();
    assert_eq!(listening, 2, "one line per port: {text}");
}

/// At debug level each request is a line of its own: its method, path,
/// status and time, never a key's value; refusals at the front door too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_logged_at_debug_without_its_keys() {
    let log = scratch("first-run-requests").join("serve.log");
    let config = settings_file("[rate_limit]\nsingle_instance = true\n");
    let args = ["--log-level", "debug", "--log-format", "json"];
    let mut serve = Serve::start_logging(Some(&config), &[], &args, Some(&log)).await;
    let r = serve.post("/v1/limits/api/attempt", r#"{"keys": {"client": "secret-client-7"}}"#).await;
    assert_eq!(r.status, 200);
    // A second Host beside the client's own: refused at the front door.
    let refused = serve.request("GET", "/v1/limits", &[("host", "evil.example")], b"").await.unwrap();
    assert_eq!(refused.status, 400);
    serve.signal("TERM");
    serve.exit_within(Duration::from_secs(15)).await.expect("serve exits on SIGTERM");
    let text = std::fs::read_to_string(&log).unwrap();
    let requests: Vec<serde_json::Value> = text
        .lines()
        .filter(|line| line.contains("limit-store-request"))
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let seen = |method: &str, path: &str, status: u64| {
        requests.iter().any(|r| {
            let f = &r["fields"];
            f["method"] == method && f["path"] == path && f["status"] == status && f["micros"].is_u64()
        })
    };
    assert!(seen("POST", "/v1/limits/api/attempt", 200), "{requests:#?}");
    assert!(seen("GET", "/v1/limits", 400), "{requests:#?}");
    assert!(!text.contains("secret-client-7"), "a key's value in the log: {text}");
}

/// `serve` without settings counts in its own memory, so its start warns
/// that several of them would each count alone (SPEC §8), once; settings
/// that say it runs as one instance start without the warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_the_embedded_default_warns_that_it_counts_alone() {
    let dir = scratch("first-run-alone");
    let (alone, single) = (dir.join("alone.log"), dir.join("single.log"));
    let config = settings_file("[rate_limit]\nsingle_instance = true\n");
    for (config, log) in [(None, &alone), (Some(config.as_path()), &single)] {
        let mut serve = Serve::start_logging(config, &[], &[], Some(log)).await;
        serve.signal("TERM");
        serve.exit_within(Duration::from_secs(15)).await.expect("serve exits on SIGTERM");
    }
    let warnings =
        |log: &std::path::Path| std::fs::read_to_string(log).unwrap().matches("limit-store-not-shared").count();
    assert_eq!(warnings(&alone), 1, "{}", std::fs::read_to_string(&alone).unwrap());
    assert_eq!(warnings(&single), 0, "{}", std::fs::read_to_string(&single).unwrap());
}

#[test]
fn a_redis_that_is_not_there_is_said_once() {
    let port = free_port();
    let config = settings_file(&format!("[rate_limit]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:{port}\"\n"));
    let args = serve_args(&config);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = failure(&args, &[("LIMIT_STORE_SECRET", SECRET)]);
    assert!(line.contains("can't reach Redis"), "{line}");
    assert_eq!(line.matches("Connection refused").count(), 1, "the cause said once: {line}");
}

/// The advice names the variable and the setting, which other users can't
/// read in the process list as they can `--secret`.
/// `stats` without a secret says one is needed, not that it is 0 bytes.
#[test]
fn a_missing_secret_names_what_the_command_reads() {
    let dir = scratch("first-run-secret");
    let url = format!("sqlite://{}?mode=rwc", dir.join("limits.db").display());
    let config = settings_file(&format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\n"));
    let args = serve_args(&config);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = failure(&args, &[]);
    assert!(line.contains("LIMIT_STORE_SECRET") && line.contains("rate_limit.secret"), "{line}");

    let redis = format!("redis://127.0.0.1:{}", free_port());
    for args in [["stats", "--database-url", &url], ["sweep", "--redis-url", &redis]] {
        let line = failure(&args, &[]);
        assert!(line.contains("needs the site secret") && line.contains("LIMIT_STORE_SECRET"), "{line}");
        assert!(!line.contains("0 bytes"), "{line}");
    }
    let line = failure(&["stats", "--redis-url", &redis, "--secret", "short"], &[]);
    assert!(line.contains("at least 32 bytes") && !line.contains("database store"), "the Redis store's: {line}");
}

/// An empty `LIMIT_STORE_SECRET` is no secret given, as an empty variable
/// is for every other setting: the file's secret stands. A database and a
/// Redis named at once are refused, not one of them quietly taken.
#[test]
fn an_empty_secret_variable_leaves_the_files_and_two_stores_are_refused() {
    let dir = scratch("first-run-empty-secret");
    let url = format!("sqlite://{}?mode=rwc", dir.join("limits.db").display());
    let toml = format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\nsecret = \"{SECRET}\"\n");
    let config = settings_file(&toml);
    let config = config.to_str().unwrap();
    assert!(limit_store().args(["migrate", "--config", config]).status().unwrap().success());
    let out = limit_store().args(["stats", "--config", config]).env("LIMIT_STORE_SECRET", "").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = limit_store()
        .args(["stats", "--database-url", &url, "--redis-url", "redis://127.0.0.1:6379", "--secret", SECRET])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("cannot be used with"), "{stderr}");
}

/// A table of the site's own name that is missing: the command the error
/// names creates that table, and `serve` then starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrate_command_a_missing_table_names_makes_that_table() {
    let dir = scratch("first-run-table");
    let url = format!("sqlite://{}?mode=rwc", dir.join("limits.db").display());
    let toml = format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"site_counts\"\n");
    let config = settings_file(&toml);
    let args = serve_args(&config);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let line = failure(&args, &[("LIMIT_STORE_SECRET", SECRET)]);
    let command = line.split('`').find(|s| s.starts_with("limit-store migrate")).unwrap_or_else(|| panic!("{line}"));
    let out = limit_store().args(command.split_whitespace().skip(1)).output().unwrap();
    assert!(out.status.success(), "{command}: {}", String::from_utf8_lossy(&out.stderr));
    // The secret by flag this time, as the other commands take it.
    let serve = Serve::start(Some(&config), &[], &["--secret", SECRET]).await;
    let body = r#"{"keys": {"account": "first-run@example.com", "ip": "192.0.2.80"}}"#;
    assert_eq!(serve.post("/v1/limits/sign-in/attempt", body).await.status, 200);
}

/// `--log-level` takes a level: any other word was taken for a module's name
/// and silenced every line. A bad `RUST_LOG` is named as the culprit.
#[test]
fn a_log_level_that_is_no_level_is_refused_naming_its_source() {
    let demo = ["demo", "--attempts", "1", "--throughput", "0"];
    let line = failure(&[&["--log-level", "warning"][..], &demo].concat(), &[]);
    assert!(line.contains("--log-level") && line.contains("use error, warn, info, debug or trace"), "{line}");
    let line = failure(&demo, &[("RUST_LOG", "[[")]);
    assert!(line.contains("RUST_LOG"), "{line}");
    for level in ["warn", "DEBUG", "off"] {
        let out = limit_store().args(["--log-level", level]).args(demo).env_remove("RUST_LOG").output().unwrap();
        assert!(out.status.success(), "{level}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// `stats` and `sweep` next to settings that count in memory: that store is
/// the serve process's, so they say so, and make no empty SQLite file.
#[test]
fn stats_on_the_memory_store_says_where_its_counts_are() {
    let dir = scratch("first-run-memory-stats");
    // A `database_url` beside the memory store is not serve's store either.
    let settings = ["", "database_url = \"sqlite://site.db\"\n"];
    for (command, extra) in ["stats", "sweep", "migrate"].into_iter().flat_map(|c| settings.map(|s| (c, s))) {
        std::fs::write(dir.join("limit-store.toml"), format!("[rate_limit]\nsingle_instance = true\n{extra}")).unwrap();
        let out = limit_store()
            .arg(command)
            .current_dir(&dir)
            .env("LIMIT_STORE_SECRET", SECRET)
            .env_remove("LIMIT_STORE_DATABASE_URL")
            .env_remove("LIMIT_STORE_REDIS_URL")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        let said = if command == "migrate" { "no table to make" } else { "/metrics" };
        assert!(stderr.contains("in memory") && stderr.contains(said), "{command}: {stderr}");
        for file in ["limit-store.db", "site.db"] {
            assert!(!dir.join(file).exists(), "{command} made an empty SQLite file, {file}");
        }
    }
}
