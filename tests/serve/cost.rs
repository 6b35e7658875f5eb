//! `"cost"` on `limit-store serve`'s attempts, over a real socket: a cost
//! counts whole or not at all, on every part; `"cost": 0` counts nothing;
//! every answer (200, 429, degraded 200 and 503) carries each part's
//! `"parts"`; a cost that is not a whole number of 0 or more, or is over a
//! part's budget, is a 422 in JSON; and three processes on one SQLite file,
//! and on PostgreSQL, count a limit of the site's own at a cost exactly.

use crate::common::db::{rand_suffix, sqlite_url, SECRET};
use crate::common::serve::{post_at_once, settings_file, Reply, Serve};
use limit_store::DatabaseStore;
use serde_json::{json, Value};

const SIGN_IN: &str = "/v1/limits/sign-in/attempt";

fn body(account: &str, cost: Option<Value>) -> String {
    let mut body = json!({"keys": {"account": account, "ip": "192.0.2.7"}});
    if let Some(cost) = cost {
        body["cost"] = cost;
    }
    body.to_string()
}

/// Each part's `(part, budget, remaining)` in an answer, after checking
/// every part says when it next has more.
fn parts(r: &Reply) -> Vec<(String, u64, u64)> {
    let body = r.json();
    let parts = body["parts"].as_array().unwrap_or_else(|| panic!("no parts: {}", r.body));
    parts
        .iter()
        .map(|p| {
            assert!(p["reset_at"].as_i64().is_some_and(|t| t > 1_700_000_000_000), "{p}");
            (p["part"].as_str().unwrap().to_owned(), p["budget"].as_u64().unwrap(), p["remaining"].as_u64().unwrap())
        })
        .collect()
}

fn left(account: u64, ip: u64) -> Vec<(String, u64, u64)> {
    vec![("account".into(), 5, account), ("ip".into(), 50, ip)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_counts_whole_on_every_part_and_a_check_counts_nothing() {
    let serve = Serve::start(None, &[], &[]).await;
    let r = serve.post(SIGN_IN, &body("ada", Some(json!(3)))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(parts(&r), left(2, 47));
    assert_eq!(r.json()["remaining"], json!(2));

    let r = serve.post(SIGN_IN, &body("ada", Some(json!(3)))).await;
    assert_eq!(r.status, 429, "3 don't fit in 2: {}", r.body);
    assert_eq!(r.json()["limited_by"], json!("account"));
    assert!(r.header("retry-after").is_some());
    assert_eq!(parts(&r), left(2, 47), "the refusal spent nothing on the ip");

    let r = serve.post(SIGN_IN, &body("ada", Some(json!(0)))).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(parts(&r), left(2, 47), "a check counts nothing");

    let r = serve.post(SIGN_IN, &body("ada", Some(json!(6)))).await;
    assert_eq!(r.status, 422, "{}", r.body);
    let e = r.json();
    assert_eq!(e["kind"], json!("cost-over-budget"));
    assert!(e["error"].as_str().unwrap().contains("budget of part `account`"), "{e}");

    // Without a cost, one; the ip counted 3 + 1 of the attempts above.
    let r = serve.post(SIGN_IN, &body("bob", None)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(parts(&r), left(4, 46));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_that_is_not_a_whole_number_of_zero_or_more_is_a_422_in_json() {
    let serve = Serve::start(None, &[], &[]).await;
    for cost in ["-1", "1.5", "3.0", "\"3\"", "null", "true", "[1]", "1e30", "18446744073709551616"] {
        let text = format!(r#"{{"keys": {{"account": "ada", "ip": "192.0.2.7"}}, "cost": {cost}}}"#);
        let r = serve.post(SIGN_IN, &text).await;
        assert_eq!(r.status, 422, "{cost}: {}", r.body);
        let e = r.json();
        assert_eq!(e["kind"], json!("invalid-cost"), "{cost}: {e}");
        assert!(e["error"].as_str().unwrap().contains("\"cost\""), "{cost}: {e}");
    }
    let r = serve.post("/v1/limits/sign-in/reset", r#"{"keys": {"account": "ada"}, "cost": 1}"#).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (422, json!("invalid-body")), "a reset takes no cost");
    let r = serve.post(SIGN_IN, &body("ada", Some(json!(18_446_744_073_709_551_615_u64)))).await;
    assert_eq!((r.status, r.json()["kind"].clone()), (422, json!("cost-over-budget")), "{}", r.body);
    let r = serve.post(SIGN_IN, &body("ada", None)).await;
    assert_eq!(parts(&r), left(4, 49), "none of the bad costs counted");
}

/// A store that can't hold the attempt's keys: the answer by the limit's
/// policy still names every part, with nothing known to be left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn degraded_answers_carry_every_part() {
    let path = settings_file("[rate_limit]\nmax_entries = 1\n");
    let serve = Serve::start(Some(&path), &[], &[]).await;
    let r = serve.post(SIGN_IN, &body("ada", Some(json!(2)))).await;
    assert_eq!(r.status, 503, "sign-in denies when its store can't count: {}", r.body);
    assert_eq!(parts(&r), left(0, 0));
    let reset = r#"{"keys": {"account": "ada", "ip": "192.0.2.7"}, "cost": 2}"#;
    let r = serve.post("/v1/limits/password-reset/attempt", reset).await;
    assert_eq!(r.status, 200, "password-reset allows: {}", r.body);
    assert!(r.json()["degraded"].is_string(), "{}", r.body);
    assert_eq!(parts(&r), vec![("account".into(), 3, 0), ("ip".into(), 20, 0)]);
    drop(serve);
    let _ = std::fs::remove_file(path);
}

/// 40 attempts of cost 3 at once, spread over three processes on one
/// SQLite file, against an account's budget of 37: exactly 12 allowed (36),
/// and the 28 refused spent nothing on the ip's 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_one_sqlite_file_count_costs_exactly() {
    three_processes_count_costs_exactly(&sqlite_url("serve-cost")).await;
}

/// The same on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_processes_on_postgres_count_costs_exactly() {
    let Some(url) = crate::common::server("LIMIT_STORE_TEST_POSTGRES") else { return };
    three_processes_count_costs_exactly(&url).await;
}

/// A limit of the site's own (two parts, a lockout on the address, an
/// override for one user) counted at a cost of 3 by 40 attempts at once
/// over three `serve` processes on one store: exactly 12 allowed for the
/// user's 37, the 28 refused spend nothing on the address's 100, and the
/// overridden user counts by its own 61 (20 of 20).
async fn three_processes_count_costs_exactly(url: &str) {
    let table = format!("ls_cost_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(url).table(&table).migrate().await.unwrap();
    let text = format!(
        "[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\ntable = \"{table}\"\n\n\
         [rate_limit.limits.tokens]\nparts = [\"user\", \"ip\"]\nbudget = 37\nwindow = \"1h\"\n\n\
         [rate_limit.limits.tokens.ip]\nalgorithm = \"lockout\"\nbudget = 200\nwindow = \"1h\"\nlock = \"1h\"\n\n\
         [rate_limit.limits.tokens.user.overrides]\n\"big-co\" = {{ budget = 61 }}\n"
    );
    let path = settings_file(&text);
    let instances = Serve::start_many(3, &path, &[("LIMIT_STORE_SECRET", SECRET)]).await;
    let tokens = "/v1/limits/tokens/attempt";
    let at_cost_3 = |user: &str| json!({"keys": {"user": user, "ip": "192.0.2.7"}, "cost": 3}).to_string();
    let statuses = post_at_once(&instances, tokens, vec![at_cost_3("shared"); 40]).await;
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    let limited = statuses.iter().filter(|&&s| s == 429).count();
    assert_eq!((allowed, limited), (12, 28), "{statuses:?}");
    let check = |user: &str| json!({"keys": {"user": user, "ip": "192.0.2.7"}, "cost": 0}).to_string();
    let r = instances[1].post(tokens, &check("shared")).await;
    assert_eq!(r.status, 200, "1 left: a check passes: {}", r.body);
    assert_eq!(parts(&r), vec![("user".into(), 37, 1), ("ip".into(), 200, 164)]);

    let statuses = post_at_once(&instances, tokens, vec![at_cost_3("big-co"); 40]).await;
    let allowed = statuses.iter().filter(|&&s| s == 200).count();
    assert_eq!(allowed, 20, "big-co's own 61 holds 20 costs of 3: {statuses:?}");
    let r = instances[2].post(tokens, &check("big-co")).await;
    assert_eq!(parts(&r), vec![("user".into(), 61, 1), ("ip".into(), 200, 104)]);
    drop(instances);
    let _ = std::fs::remove_file(path);
}

/// `/openapi.json` describes the attempt's `cost` and the answer's `parts`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_document_describes_cost_and_parts() {
    let serve = Serve::start(None, &[], &[]).await;
    let doc = serve.request("GET", "/openapi.json", &[], b"").await.unwrap().json();
    let schemas = &doc["components"]["schemas"];
    assert!(schemas["AttemptBody"]["properties"]["cost"].is_object(), "{}", schemas["AttemptBody"]);
    assert!(schemas["DecisionBody"]["properties"]["parts"].is_object(), "{}", schemas["DecisionBody"]);
    let part: Vec<&str> =
        schemas["PartLeftBody"]["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(part, ["part", "budget", "remaining", "reset_at"]);
    let attempt = &doc["paths"]["/v1/limits/{name}/attempt"]["post"]["requestBody"]["content"]["application/json"];
    assert_eq!(attempt["schema"]["$ref"], json!("#/components/schemas/AttemptBody"));
}

/// A check (`"cost": 0`) counts nothing, so `/metrics` counts it as no
/// attempt, allowed or limited; a cost over an overridden value's budget
/// is refused with that budget, not the part's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_is_no_attempt_in_the_metrics_and_an_override_says_its_budget() {
    let path = settings_file(
        "[rate_limit]\nsingle_instance = true\n\n\
         [rate_limit.limits.tokens]\nparts = [\"user\"]\nbudget = 37\nwindow = \"1h\"\n\n\
         [rate_limit.limits.tokens.user.overrides]\n\"big-co\" = { budget = 61 }\n",
    );
    let serve = Serve::start(Some(&path), &[], &[]).await;
    let tokens = |user: &str, cost: u64| json!({"keys": {"user": user}, "cost": cost}).to_string();
    for _ in 0..3 {
        assert_eq!(serve.post(SIGN_IN, &body("ada", Some(json!(0)))).await.status, 200);
        assert_eq!(serve.post("/v1/limits/api/attempt", r#"{"keys": {"client": "c-1"}, "cost": 0}"#).await.status, 200);
    }
    assert_eq!(serve.post(SIGN_IN, &body("ada", Some(json!(5)))).await.status, 200);
    assert_eq!(serve.post(SIGN_IN, &body("ada", Some(json!(0)))).await.status, 429, "a check that would be refused");
    assert_eq!(serve.post(SIGN_IN, &body("ada", None)).await.status, 429);
    let text = serve.request("GET", "/metrics", &[], b"").await.unwrap().body;
    for line in [
        r#"limit_store_attempts_total{limit="sign-in",outcome="allowed"} 1"#,
        r#"limit_store_attempts_total{limit="sign-in",outcome="limited"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
    }
    assert!(!text.contains(r#"limit="api""#), "checks counted as attempts:\n{text}");

    let r = serve.post("/v1/limits/tokens/attempt", &tokens("big-co", 62)).await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert!(r.json()["error"].as_str().unwrap().contains("(61)"), "the override's budget: {}", r.body);
    let r = serve.post("/v1/limits/tokens/attempt", &tokens("small", 38)).await;
    assert!(r.json()["error"].as_str().unwrap().contains("(37)"), "the part's budget: {}", r.body);
    assert_eq!(serve.post("/v1/limits/tokens/attempt", &tokens("big-co", 40)).await.status, 200);
    let _ = std::fs::remove_file(path);
}
