//! `serve --grpc-listen`: Envoy's rate limit service, tested from outside
//! by a Python client on Envoy's published data-plane API
//! (`tests/envoy/client.py`, grpcio and envoy-data-plane from PyPI) against
//! the real binary: on memory, and on one SQLite file and on PostgreSQL with
//! two processes (80 concurrent requests for one key answered exactly by the
//! budget), multi-rule atomicity, hits_addend (0 too), shadow, unlimited,
//! unknown domains, the token, a full store, reload, SIGTERM, and YAML
//! refused with its file, line and key (its line and key for every rule:
//! `src/serve/envoy/yaml.rs`).
//!
//! The client and Envoy run in the virtualenv `target/ci-venv`, made by the
//! first test that needs it (`venv.rs`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, server, sqlite_url, SECRET};
use crate::common::serve::{free_port, limit_store, settings_file, Serve};
use crate::venv::{envoy, python};
use limit_store::DatabaseStore;

const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy/rules.yaml");
const CLIENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy/client.py");

/// Runs `scenario` of the Python client; panics with its output unless it passes.
fn client(scenario: &str, grpc: &[&str], extra: &[&str]) -> String {
    let tag = format!("{scenario}-{}", rand_suffix());
    let out = Command::new(python())
        .arg(CLIENT)
        .arg(scenario)
        .args(["--grpc", &grpc.join(","), "--tag", &tag])
        .args(extra)
        .output()
        .expect("run the Python client");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "client.py {scenario}:\n{text}");
    text
}

/// A running `serve` with the Envoy service, and where it answers gRPC.
struct Envoy {
    serve: Serve,
    grpc: String,
}

/// Starts `serve` on the settings `toml` (the rules are `RULES` unless it names others).
async fn start(toml: &str, env: &[(&str, &str)], log: Option<&Path>) -> Envoy {
    let config = settings_file(toml);
    let grpc = format!("127.0.0.1:{}", free_port());
    let serve = Serve::start_logging(Some(&config), env, &["--grpc-listen", &grpc], log).await;
    Envoy { serve, grpc }
}

fn settings(extra: &str) -> String {
    format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{RULES}\"\n{extra}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_answer_as_envoy_expects_on_memory() {
    let envoy = start(&settings(""), &[], None).await;
    let grpc = [envoy.grpc.as_str()];
    for scenario in ["exact", "atomic", "hits", "unlimited", "unknown"] {
        client(scenario, &grpc, &[]);
    }
    client("shadow", &grpc, &["--http", &envoy.serve.addr]);
}

/// Two processes on one store: exact across both, atomic across both.
async fn two_processes_count_as_one(url: &str) {
    let table = format!("ls_envoy_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(url).table(&table).migrate().await.unwrap();
    let toml = format!(
        "[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"\nenvoy_config = \"{RULES}\"\n"
    );
    let env = [("LIMIT_STORE_SECRET", SECRET)];
    let (a, b) = (start(&toml, &env, None).await, start(&toml, &env, None).await);
    let grpc = [a.grpc.as_str(), b.grpc.as_str()];
    client("exact", &grpc, &[]);
    client("atomic", &grpc, &[]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_one_sqlite_file_count_as_one() {
    two_processes_count_as_one(&sqlite_url("envoy")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_postgres_count_as_one() {
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    two_processes_count_as_one(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_is_required_as_metadata() {
    let token = "envoy-test-token-0123456789abcdef";
    let envoy = start(&settings(""), &[("LIMIT_STORE_API_TOKEN", token)], None).await;
    client("token", &[&envoy.grpc], &["--token", token]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_count_answers_unavailable() {
    let envoy = start(&settings("max_entries = 1\n"), &[], None).await;
    client("unavailable", &[&envoy.grpc], &[]);
}

/// `serve` with `args` and `env` exits at once, saying `expected`.
fn refuses_to_start(toml: &str, env: &[(&str, &str)], args: &[&str], expected: &[&str]) {
    let config = settings_file(toml);
    let mut command = limit_store();
    command.args(["serve", "--config", config.to_str().unwrap(), "--listen", &format!("127.0.0.1:{}", free_port())]);
    command.args(args).env_remove("LIMIT_STORE_API_TOKEN").env_remove("LIMIT_STORE_ENVOY_CONFIG");
    for (k, v) in env {
        command.env(k, v);
    }
    let out = command.output().expect("run serve");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started: {text}");
    for part in expected {
        assert!(text.contains(part), "expected {part:?} in: {text}");
    }
}

#[test]
fn grpc_beyond_loopback_needs_a_token_and_rules() {
    let anywhere = format!("0.0.0.0:{}", free_port());
    refuses_to_start(&settings(""), &[], &["--grpc-listen", &anywhere], &["LIMIT_STORE_API_TOKEN", "--grpc-listen"]);
    let loopback = format!("127.0.0.1:{}", free_port());
    let no_rules = "[rate_limit]\nsingle_instance = true\n";
    refuses_to_start(
        no_rules,
        &[],
        &["--grpc-listen", &loopback],
        &["rate_limit.envoy_config", "LIMIT_STORE_ENVOY_CONFIG"],
    );
}

#[test]
fn a_bad_rules_file_is_refused_at_start_with_its_file_line_and_key() {
    let yaml = std::env::temp_dir().join(format!("limit-store-envoy-bad-{}.yaml", rand_suffix()));
    std::fs::write(&yaml, "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n").unwrap();
    let toml = format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{}\"\n", yaml.display());
    let loopback = format!("127.0.0.1:{}", free_port());
    let file = yaml.display().to_string();
    refuses_to_start(&toml, &[], &["--grpc-listen", &loopback], &[&file, "line 5", "descriptors[0].rate_limit.unit"]);
}

/// The answers of `keys` (`key limit remaining` lines), each counting `hits`.
fn answers(grpc: &str, tag: &str, keys: &str, hits: u32) -> String {
    let out = Command::new(python())
        .args([CLIENT, "answers", "--grpc", grpc, "--tag", tag, "--keys", keys, "--hits", &hits.to_string()])
        .output()
        .expect("run the Python client");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_counts_and_a_bad_file_keeps_the_running_rules() {
    let dir = std::env::temp_dir().join(format!("limit-store-envoy-reload-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = |budget: u32| {
        format!(
            "domain: test\ndescriptors:\n  - key: k\n    rate_limit: {{ unit: hour, requests_per_unit: {budget} }}\n"
        )
    };
    std::fs::write(dir.join("rules.yaml"), yaml(3)).unwrap();
    let toml = format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{}\"\n", dir.display());
    let log = dir.join("serve.log");
    let envoy = start(&toml, &[], Some(&log)).await;
    let tag = format!("reload-{}", rand_suffix());
    assert_eq!(answers(&envoy.grpc, &tag, "k", 2), "k 3 1\n", "two hits counted");
    // A raised budget applies to the count held.
    std::fs::write(dir.join("rules.yaml"), yaml(5)).unwrap();
    wait_for(|| answers(&envoy.grpc, &tag, "k", 0) == "k 5 3\n", "the raised budget, on the two held");
    // A bad file: refused with its line and key, the running rules answer.
    std::fs::write(dir.join("more.yml"), "domain: other\ndescriptors:\n  - key: a\n    rate_limit: { unit: eon }\n")
        .unwrap();
    wait_for(|| std::fs::read_to_string(&log).unwrap_or_default().contains("limit-store-envoy-refused"), "the refusal");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("more.yml line 4") && text.contains("descriptors[0].rate_limit.unit"), "{text}");
    assert_eq!(answers(&envoy.grpc, &tag, "k", 0), "k 5 3\n");
    drop(envoy);
    let _ = std::fs::remove_dir_all(dir);
}

fn wait_for(mut done: impl FnMut() -> bool, what: &str) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(15), "{what} did not come within 15 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `n`th YAML block of the guide's Envoy page (`docs/guide/envoy.md`).
fn guide_yaml(n: usize) -> String {
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide/envoy.md")).unwrap();
    let block = page.split("```yaml\n").nth(n + 1).and_then(|s| s.split("\n```").next());
    block.expect("the guide's Envoy page has its YAML blocks").to_owned()
}

/// A process killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guide_envoy_yaml_runs_with_a_real_envoy() {
    let dir = std::env::temp_dir().join(format!("limit-store-envoy-readme-{}", rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rules.yaml"), guide_yaml(0)).unwrap();
    let token = "readme-envoy-token-0123456789abcdef";
    let toml =
        format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{}\"\n", dir.join("rules.yaml").display());
    let limit_store = start(&toml, &[("LIMIT_STORE_API_TOKEN", token)], None).await;
    // The guide's envoy.yaml, with this run's ports and the token line on.
    let ingress = free_port();
    let http_port = limit_store.serve.addr.rsplit(':').next().unwrap().to_owned();
    let grpc_port = limit_store.grpc.rsplit(':').next().unwrap().to_owned();
    let readme = guide_yaml(1);
    for line in ["port_value: 10000", "port_value: 8081", "port_value: 8080", "# initial_metadata:", "Bearer <token>"] {
        assert!(readme.contains(line), "the guide's envoy.yaml has `{line}`");
    }
    let config = readme
        .replace("port_value: 10000", &format!("port_value: {ingress}"))
        .replace("port_value: 8081", &format!("port_value: {grpc_port}"))
        .replace("port_value: 8080", &format!("port_value: {http_port}"))
        .replace("# initial_metadata:", "initial_metadata:")
        .replace("Bearer <token>", &format!("Bearer {token}"));
    std::fs::write(dir.join("envoy.yaml"), config).unwrap();
    let log = std::fs::File::create(dir.join("envoy.log")).unwrap();
    let _envoy = Killed(
        Command::new(envoy())
            .args(["-c", dir.join("envoy.yaml").to_str().unwrap(), "--disable-hot-restart", "--log-level", "warn"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start envoy"),
    );
    let front = format!("127.0.0.1:{ingress}");
    let get = |headers: &'static [(&'static str, &'static str)]| {
        let front = front.clone();
        async move { crate::common::serve::request(&front, "GET", "/healthz", headers, b"").await.map(|r| r.status) }
    };
    let started = Instant::now();
    while get(&[]).await.is_err() {
        let log = std::fs::read_to_string(dir.join("envoy.log")).unwrap_or_default();
        assert!(started.elapsed() < Duration::from_secs(30), "envoy did not start within 30 s:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bearer = format!("Bearer {token}");
    let metrics = || async {
        let auth = [("authorization", bearer.as_str())];
        limit_store.serve.request("GET", "/metrics", &auth, b"").await.unwrap().body
    };
    let counted = |text: &str, rule: &str, outcome: &str| -> usize {
        let name = format!("limit_store_envoy_descriptors_total{{rule=\"{rule}\",outcome=\"{outcome}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&name)).map_or(0, |n| n.parse().unwrap())
    };
    // Requests while Envoy's first call to limit-store was on its way may
    // have been let through uncounted (failure_mode_deny: false): start from
    // what was counted.
    let before = counted(&metrics().await, "site.remote_address", "allowed");
    assert!(before <= 1, "one request so far");
    let mut statuses = Vec::new();
    for i in before..101 {
        let key: &'static [(&'static str, &'static str)] =
            if i % 2 == 0 { &[("x-api-key", "partner-key-1")] } else { &[("x-api-key", "k1")] };
        statuses.push(get(key).await.unwrap());
    }
    let (last, allowed) = statuses.split_last().unwrap();
    assert!(allowed.iter().all(|&s| s == 200), "{statuses:?}");
    assert_eq!(*last, 429, "the 101st from one address: {statuses:?}");
    let text = metrics().await;
    assert_eq!(counted(&text, "site.remote_address", "allowed"), 100, "{text}");
    assert_eq!(counted(&text, "site.remote_address", "over_limit"), 1, "{text}");
    assert_eq!(counted(&text, "per-api-key", "allowed"), (before..101).filter(|i| i % 2 == 1).count(), "{text}");
    drop(limit_store);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_http_and_grpc_and_exits_0() {
    let mut envoy = start(&settings(""), &[], None).await;
    client("unlimited", &[&envoy.grpc], &[]);
    let pid = envoy.serve.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = envoy.serve.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "serve did not stop within 15 s of SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}");
    assert!(std::net::TcpStream::connect(&envoy.grpc).is_err(), "the gRPC listener is closed");
}
