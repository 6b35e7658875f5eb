//! No `Debug`, `Display` or error shows a password or the site secret: every
//! config, builder and error type is formatted here with known ones in it.

use limit_store::config::Config;
use limit_store::{DatabaseStore, Limits, SecretString, SecretUrl};

const PASSWORD: &str = "pa55-hunter2-word";
const SECRET: &str = "the-site-secret-0123456789abcdef-0123456789";

fn assert_clean(what: &str, text: &str) {
    assert!(!text.contains(PASSWORD), "{what} shows the password: {text}");
    assert!(!text.contains(SECRET), "{what} shows the secret: {text}");
}

fn every_format<T: std::fmt::Debug>(what: &str, value: &T) {
    assert_clean(what, &format!("{value:?}"));
    assert_clean(what, &format!("{value:#?}"));
}

fn urls() -> Vec<String> {
    vec![
        format!("postgres://app:{PASSWORD}@127.0.0.1:1/app"),
        format!("postgres://app@127.0.0.1:1/app?password={PASSWORD}&sslmode=disable"),
        format!("mysql://app:{PASSWORD}@127.0.0.1:1/app"),
        format!("mysql://app@127.0.0.1:1/app?sslpassword={PASSWORD}"),
        format!("mysql://app:{PASSWORD}@127.0.0.1:notaport/app"),
        format!("postgres://app:{PASSWORD}@[not-a-host/app"),
    ]
}

#[test]
fn configs_show_neither() {
    for url in urls() {
        let text = format!("[rate_limit]\nstore = \"database\"\ndatabase_url = \"{url}\"\nsecret = \"{SECRET}\"\n");
        let config = Config::parse(&text).unwrap();
        every_format("Config", &config);
        assert_eq!(config.database_url.expose(), url, "the URL itself is kept");
        let mut from_env = Config::default();
        from_env.apply_env(|var| match var {
            "LIMIT_STORE_DATABASE_URL" => Some(url.clone()),
            "LIMIT_STORE_SECRET" => Some(SECRET.into()),
            _ => None,
        });
        every_format("Config from the environment", &from_env);
        every_format("LimitsBuilder", &config.apply(Limits::builder()));
    }
    let secret = SecretString::new(SECRET);
    assert_clean("SecretString", &format!("{secret} {secret:?}"));
    let url = SecretUrl::new(urls()[0].clone());
    assert_clean("SecretUrl", &format!("{url} {url:?}"));
}

#[tokio::test]
async fn builders_and_their_errors_show_neither() {
    for url in urls() {
        let builder = DatabaseStore::builder(&url).secret(SECRET);
        every_format("DatabaseStoreBuilder", &builder);
        let err = builder.connect().await.expect_err("nothing listens on port 1");
        assert_clean("a connect error", &err.to_string());
        every_format("a connect error", &err);
        let err = DatabaseStore::builder(&url).migrate().await.expect_err("nothing listens on port 1");
        assert_clean("a migrate error", &err.to_string());
        every_format("a migrate error", &err);
    }
    let config = Config::parse(&format!(
        "[rate_limit]\nstore = \"database\"\ndatabase_url = \"{}\"\nsecret = \"{SECRET}\"\n",
        urls()[0]
    ))
    .unwrap();
    let err = config.build_limits().await.expect_err("nothing listens on port 1");
    assert_clean("a limits error", &err.to_string());
    every_format("a limits error", &err);
}

/// A memory store shows its fill, not what it holds: no stored value, and
/// no hash state (the random key its keys are held under).
#[tokio::test]
async fn a_memory_store_shows_its_fill_not_its_entries() {
    use limit_store::{update_with, Entry, MemoryStore, Write};
    let store = MemoryStore::new();
    update_with(&store, &["k"], |_, now| {
        let entry = Entry { value: serde_json::json!(PASSWORD), expires_at: now + 60_000 };
        (vec![Write::Put(entry)], ())
    })
    .await
    .unwrap();
    every_format("MemoryStore", &store);
    let shown = format!("{store:?}");
    assert!(shown.contains("len: 1") && !shown.contains("sip"), "{shown}");
}
