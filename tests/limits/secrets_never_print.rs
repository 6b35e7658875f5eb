//! No `Debug`, `Display` or error shows a password or the site secret: every
//! config, builder and error type is formatted here with known ones in it.

use limit_store::config::Config;
use limit_store::{DatabaseStore, Limits, SecretString, SecretUrl};
use proptest::prelude::*;

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
        from_env
            .apply_env(|var| match var {
                "LIMIT_STORE_DATABASE_URL" => Some(url.clone()),
                "LIMIT_STORE_SECRET" => Some(SECRET.into()),
                _ => None,
            })
            .unwrap();
        every_format("Config from the environment", &from_env);
        every_format("LimitsBuilder", &config.apply(Limits::builder()));
    }
    let secret = SecretString::from(SECRET);
    assert_clean("SecretString", &format!("{secret} {secret:?}"));
    let url = SecretUrl::from(urls()[0].clone());
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
    assert!(shown.contains("held: 1") && !shown.contains("sip"), "{shown}");
}

/// A password of capitals and the characters a URL parser reads as the end
/// of a part (`?`, `#`, `@`, `/`, `%`, `:`): everything else in the URLs
/// below is lower case, so a capital in the output is a piece of it.
fn password(with: &'static str) -> impl Strategy<Value = String> {
    let piece =
        prop_oneof![proptest::char::range('A', 'Z'), proptest::sample::select(with.chars().collect::<Vec<_>>())];
    (proptest::char::range('A', 'Z'), proptest::collection::vec(piece, 0..16))
        .prop_map(|(first, rest)| std::iter::once(first).chain(rest).collect())
}

proptest! {
    #[test]
    fn no_url_form_shows_its_password(pw in password("?#@/%:"), lone in password("?#@/%"), query in password("?#@/%:")) {
        for url in [
            format!("postgres://app:{pw}@db.internal:5432/app?sslmode=require"),
            format!("postgresql://app:{pw}@db/app"),
            format!("mysql://app:{pw}@127.0.0.1:3306/app"),
            format!("sqlite://counts.db?password={query}"),
            format!("redis://:{pw}@cache:6379/0"),
            format!("rediss://default:{pw}@cache:6380"),
            format!("redis://{lone}@cache"),
            format!("redis+cluster://:{pw}@h1:6379,h2:6380"),
            format!("rediss+cluster://app:{pw}@[fd00::1]:6379,[fd00::2]:6379"),
            format!("redis+sentinel://:{pw}@h1:26379,h2:26379/mymaster"),
            format!("redis+sentinel://h1:26379,h2:26379/mymaster?sentinel_password={query}"),
            format!("postgres://app@db/app?password={query}&sslmode=require"),
            format!("mysql://app@db/app?sslmode=required&sslpassword={query}"),
            format!("postgres://app@db/app?pasword={query}&sslmode=require"),
            format!("sqlite://counts.db?key={query}&mode=rwc"),
            format!("postgres://app:{pw}@db/app?password={query}"),
            format!("postgres://app:{pw}@[not-a-host/app"),
            format!("mysql://app:{pw}@db:notaport/app"),
            format!("redis://:{pw}@"),
            format!("postgres://app:{pw}@db:99999/app"),
        ] {
            let secret = SecretUrl::from(url.clone());
            for shown in [secret.to_string(), format!("{secret:?}")] {
                prop_assert!(!shown.bytes().any(|b| b.is_ascii_uppercase()), "{url} shows as {shown}");
            }
        }
    }
}
