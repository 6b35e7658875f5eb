//! `limit-store.toml`: a good file, errors that name the key and its line,
//! environment overrides, and limits built from the settings.

use limit_store::config::{Config, ConfigError, StoreKind};
use limit_store::{Limits, Policy};

const GOOD: &str = r#"
# every key there is
[rate_limit]
store = "database"
database_url = "postgres://limits@db/site"
single_instance = true
max_entries = 250000
durable_commits = true
secret = "from-the-file-0123456789abcdef0123456789"

[rate_limit.limits.sign-in]
budget = 10
window = "30m"
policy = "allow"
shadow = true

[rate_limit.limits.sign-in.ip]
budget = 100
window = "1h"

[rate_limit.limits.api]
policy = "deny"
"#;

fn err(text: &str) -> ConfigError {
    Config::parse(text).expect_err("the file should be refused")
}

#[test]
fn a_good_file() {
    let c = Config::parse(GOOD).unwrap();
    assert_eq!(c.store, StoreKind::Database);
    assert_eq!(c.database_url.expose(), "postgres://limits@db/site");
    assert!(c.single_instance);
    assert_eq!(c.max_entries, Some(250_000));
    assert!(c.durable_commits);
    assert_eq!(c.secret.as_ref().map(|s| s.expose()), Some("from-the-file-0123456789abcdef0123456789"));
    assert!(!format!("{c:?}").contains("from-the-file"), "Debug hides the secret");
    let limits = c.apply(Limits::builder()).build().unwrap();
    let sign_in = limits.limit("sign-in").unwrap();
    assert_eq!(sign_in.unavailable_policy(), Policy::Allow);
    assert!(sign_in.is_shadow());
    let [account, ip] = sign_in.parts() else { panic!("{sign_in:?}") };
    assert_eq!(account.name(), "account", "the limit-level budget is the first part's");
    assert_eq!((account.algorithm().budget(), account.algorithm().window()), (10, 1_800_000));
    assert_eq!((ip.name(), ip.algorithm().budget(), ip.algorithm().window()), ("ip", 100, 3_600_000));
    assert_eq!(limits.limit("api").unwrap().unavailable_policy(), Policy::Deny);
}

#[test]
fn an_empty_file_is_the_defaults() {
    let c = Config::parse("").unwrap();
    assert_eq!(c, Config::default());
    assert_eq!(c.store, StoreKind::Memory);
    assert_eq!(c.database_url.expose(), "sqlite://limit-store.db");
    assert!(!c.single_instance);
    assert!(!c.durable_commits, "counts do not wait for the disk by default");
}

#[test]
fn unknown_keys_name_the_key_and_the_line() {
    let e = err("[rate_limit]\nstore = \"memory\"\nsingle_instanse = true\n");
    assert_eq!(e.line, Some(3));
    assert_eq!(e.key.as_deref(), Some("rate_limit.single_instanse"));
    let text = e.to_string();
    assert!(text.contains("line 3") && text.contains("single_instanse"), "{text}");
    assert!(text.contains("single_instance"), "says what is expected: {text}");

    let e = err("[rate_limits]\nstore = \"memory\"\n");
    assert_eq!((e.line, e.key.as_deref()), (Some(1), Some("rate_limits")));

    let e = err("[rate_limit.limits.sign-in.ip]\nbudget = 5\n\nbugdet = 6\n");
    assert_eq!(e.line, Some(4));
    assert_eq!(e.key.as_deref(), Some("rate_limit.limits.sign-in.ip.bugdet"));

    let e = err("[rate_limit.limits.sign-in]\nemail = 5\n");
    assert_eq!(e.line, Some(2));
    assert!(e.to_string().contains("account, ip"), "{e}");

    let e = err("[rate_limit.limits.login]\nbudget = 5\n");
    assert_eq!(e.line, Some(1));
    assert!(e.to_string().contains("sign-in"), "{e}");
}

#[test]
fn bad_values_name_the_key_and_the_line() {
    for (text, line, key, says) in [
        ("[rate_limit]\nstore = \"dynamodb\"\n", 2, "rate_limit.store", "\"memory\", \"database\" or \"redis\""),
        ("[rate_limit]\n\nsingle_instance = \"yes\"\n", 3, "rate_limit.single_instance", "true or false"),
        ("[rate_limit]\nmax_entries = 0\n", 2, "rate_limit.max_entries", "at least 1"),
        ("[rate_limit]\nmax_entries = -5\n", 2, "rate_limit.max_entries", "at least 1"),
        ("[rate_limit.limits.api]\nwindow = \"15x\"\n", 2, "rate_limit.limits.api.window", "\"15m\""),
        ("[rate_limit.limits.api]\nwindow = 900\n", 2, "rate_limit.limits.api.window", "string"),
        ("[rate_limit.limits.api]\nbudget = \"600\"\n", 2, "rate_limit.limits.api.budget", "whole number"),
        ("[rate_limit.limits.api]\npolicy = \"open\"\n", 2, "rate_limit.limits.api.policy", "\"allow\" or \"deny\""),
        ("[rate_limit]\ndeadline = \"0s\"\n", 2, "rate_limit.deadline", "longer than 0"),
        ("[rate_limit]\ndeadline = \"000ms\"\n", 2, "rate_limit.deadline", "longer than 0"),
        ("[rate_limit]\ndeadline = \"1000000y\"\n", 2, "rate_limit.deadline", "a whole number and a unit"),
        ("[rate_limit]\ndeadline = \"213503982335d\"\n", 2, "rate_limit.deadline", "too long"),
        ("[rate_limit.limits.api]\nwindow = \"0m\"\n", 2, "rate_limit.limits.api.window", "longer than 0"),
    ] {
        let e = err(text);
        assert_eq!(e.line, Some(line), "{text}: {e}");
        assert_eq!(e.key.as_deref(), Some(key), "{text}: {e}");
        assert!(e.to_string().contains(says), "{text}: {e}");
    }
}

#[test]
fn broken_toml_says_the_line() {
    let e = err("[rate_limit]\nstore = \"memory\"\nmax_entries = = 3\n");
    assert_eq!(e.line, Some(3), "{e}");
}

#[test]
fn the_environment_overrides_the_url_and_the_secret() {
    let mut c = Config::parse(GOOD).unwrap();
    c.apply_env(|var| match var {
        "LIMIT_STORE_DATABASE_URL" => Some("mysql://other/site".into()),
        "LIMIT_STORE_SECRET" => Some("from-the-environment-0123456789abcdef".into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(c.database_url.expose(), "mysql://other/site");
    assert_eq!(c.secret.as_ref().map(|s| s.expose()), Some("from-the-environment-0123456789abcdef"));
    // Unset or empty variables leave the file's values.
    let mut c = Config::parse(GOOD).unwrap();
    c.apply_env(|var| (var == "LIMIT_STORE_SECRET").then(String::new)).unwrap();
    assert_eq!(c.database_url.expose(), "postgres://limits@db/site");
    assert!(c.secret.as_ref().map(|s| s.expose()).unwrap().starts_with("from-the-file"));
}

#[test]
fn load_names_the_file() {
    let path = std::env::temp_dir().join(format!("limit-store-config-{}.toml", std::process::id()));
    std::fs::write(&path, "[rate_limit]\nstore = \"memory\"\n\nstorre = 1\n").unwrap();
    let e = Config::load(&path).unwrap_err();
    assert!(e.to_string().starts_with(&format!("{} line 4", path.display())), "{e}");
    std::fs::remove_file(&path).unwrap();
    let e = Config::load(&path).unwrap_err();
    assert!(e.to_string().contains("can't read"), "{e}");
}

#[tokio::test]
async fn limits_built_from_a_file() {
    let logs = crate::common::capture_logs();
    let c =
        Config::parse("[rate_limit.limits.code-verify]\nbudget = 2\n[rate_limit.limits.api]\nshadow = true\n").unwrap();
    let limits = c.build_limits().await.unwrap();
    assert_eq!(logs.lines_of_kind("limit-store-not-shared").len(), 1, "memory without single_instance");
    let code = [("code", "c")];
    assert!(limits.attempt("code-verify", &code).await.unwrap().allowed);
    assert!(limits.attempt("code-verify", &code).await.unwrap().allowed);
    assert!(!limits.attempt("code-verify", &code).await.unwrap().allowed, "the file's budget of 2");
    assert!(limits.limit("api").unwrap().is_shadow());

    let c = Config::parse("[rate_limit]\nsingle_instance = true\nmax_entries = 10\n").unwrap();
    let _ = c.build_limits().await.unwrap();
    assert_eq!(logs.lines_of_kind("limit-store-not-shared").len(), 1, "no second warning");
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn the_database_store_from_a_file_and_the_environment() {
    let url = crate::common::db::sqlite_url("config");
    limit_store::DatabaseStore::builder(&url).migrate().await.unwrap();
    let mut c = Config::parse("[rate_limit]\nstore = \"database\"\n").unwrap();
    let err = {
        let mut no_secret = c.clone();
        no_secret.apply_env(|var| (var == "LIMIT_STORE_DATABASE_URL").then(|| url.clone())).unwrap();
        no_secret.build_limits().await.unwrap_err()
    };
    assert!(err.to_string().contains("LIMIT_STORE_SECRET"), "{err}");
    c.apply_env(|var| match var {
        "LIMIT_STORE_DATABASE_URL" => Some(url.clone()),
        "LIMIT_STORE_SECRET" => Some(crate::common::db::SECRET.into()),
        _ => None,
    })
    .unwrap();
    let limits = c.build_limits().await.unwrap();
    for _ in 0..5 {
        assert!(limits.attempt("code-verify", &[("code", "c")]).await.unwrap().allowed);
    }
    assert!(!limits.attempt("code-verify", &[("code", "c")]).await.unwrap().allowed);
}

#[test]
fn redis_is_a_store_with_its_url_in_the_file_or_the_environment() {
    let mut c = Config::parse("[rate_limit]\nstore = \"redis\"\nredis_url = \"redis://:pw@cache:6379/2\"\n").unwrap();
    assert_eq!(c.store, StoreKind::Redis);
    assert_eq!(c.redis_url.as_ref().map(|u| u.expose()), Some("redis://:pw@cache:6379/2"));
    assert!(!format!("{c:?}").contains(":pw@"), "Debug hides the password");
    c.apply_env(|var| (var == "LIMIT_STORE_REDIS_URL").then(|| "rediss://cache.internal:6380".to_owned())).unwrap();
    assert_eq!(c.redis_url.as_ref().map(|u| u.expose()), Some("rediss://cache.internal:6380"));
}

/// A name written in the settings reaches its error as written, but never
/// as a terminal escape or a right-to-left override: both are spelt out.
#[test]
fn an_error_never_prints_a_control_or_reordering_character() {
    let text =
        err("[rate_limit.limits.\"a\\u001b[31mRED\"]\nparts = [\"user\"]\nbudget = 3\nwindow = \"1m\"\n").to_string();
    assert!(text.contains("a\\u{1b}[31mRED") && !text.contains('\u{1b}'), "{text}");
    let error = ConfigError {
        origin: "limit-store.toml".into(),
        line: Some(3),
        key: Some("rate_limit.limits.x.us\u{202e}er".into()),
        message: "line one\nline two".into(),
    };
    let text = error.to_string();
    assert!(text.contains("us\\u{202e}er") && text.contains("one\\u{a}line") && !text.contains('\n'), "{text}");
}

/// Two overrides that are one value once their part normalises them (case
/// on a folded part, two addresses of one /64 on an `ip` part) are refused,
/// naming both: the last one's budget held, and the first was never read.
#[test]
fn overrides_that_normalise_alike_are_refused_naming_both() {
    for (normalize, a, b) in [("folded", "Ann@example.com", "ann@example.com"), ("ip", "2001:db8::1", "2001:db8::2")] {
        let text = format!(
            "[rate_limit]\nsingle_instance = true\n[rate_limit.limits.vip]\nparts = [\"user\"]\nbudget = 3\nwindow = \"1m\"\n\
             [rate_limit.limits.vip.user]\nnormalize = \"{normalize}\"\n\
             [rate_limit.limits.vip.user.overrides]\n\"{a}\" = {{ budget = 1 }}\n\"{b}\" = {{ budget = 100 }}\n"
        );
        let config = Config::parse(&text).unwrap();
        let error = config.apply(Limits::builder()).build().unwrap_err().to_string();
        assert!(error.contains(a) && error.contains(b) && error.contains("same value"), "{error}");
    }
}

/// A part's name that no table could hold is refused on the `parts` line,
/// not later with advice to write a table it would refuse.
#[test]
fn a_bad_part_name_is_refused_where_the_parts_are_listed() {
    let e = err("[rate_limit.limits.uploads]\nbudget = 3\nwindow = \"1m\"\nparts = [\"user\", \"bad part\"]\n");
    assert_eq!(e.line, Some(4), "{e}");
    assert!(e.to_string().contains("a part's name is") && !e.to_string().contains("set budget"), "{e}");
}
