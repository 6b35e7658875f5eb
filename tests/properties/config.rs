//! The settings file and its environment overrides: parsing never panics, an
//! error names a line of the file, the overrides win when set, the secret never
//! shows in `Debug`, and what parses builds limits (or a named error) without
//! panicking.

#![allow(dead_code)] // each user takes what it needs

use std::sync::Arc;

use limit_store::config::Config;
use limit_store::{Limits, MemoryStore};

/// The text of `limit-store.toml` and the three environment overrides.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The file.
    pub text: &'a str,
    /// `LIMIT_STORE_DATABASE_URL`, `LIMIT_STORE_REDIS_URL`, `LIMIT_STORE_SECRET`.
    pub env: [Option<&'a str>; 3],
}

impl<'a> Input<'a> {
    /// The fuzzer's bytes: the file, then up to three overrides, separated by NUL.
    pub fn from_bytes(data: &'a [u8]) -> Option<Self> {
        let text = std::str::from_utf8(data).ok()?;
        let mut pieces = text.split('\0');
        let file = pieces.next().unwrap_or("");
        let env = [pieces.next(), pieces.next(), pieces.next()];
        Some(Input { text: file, env })
    }
}

/// Checks every property on one input.
pub fn check(input: &Input<'_>) {
    let parsed = Config::parse(input.text);
    assert_eq!(parsed, Config::parse(input.text), "parsing is deterministic");
    let mut config = match parsed {
        Err(e) => {
            let lines = input.text.bytes().filter(|&b| b == b'\n').count() + 1;
            if let Some(line) = e.line {
                assert!((1..=lines).contains(&line), "line {line} of a {lines}-line file: {e}");
            }
            assert!(!e.message.trim().is_empty(), "an error says what is wrong: {e:?}");
            assert!(e.to_string().starts_with("limit-store.toml"), "{e}");
            return;
        }
        Ok(config) => config,
    };
    let [database_url, redis_url, secret] = input.env;
    let env = |var: &str| match var {
        "LIMIT_STORE_DATABASE_URL" => database_url.map(str::to_owned),
        "LIMIT_STORE_REDIS_URL" => redis_url.map(str::to_owned),
        "LIMIT_STORE_SECRET" => secret.map(str::to_owned),
        _ => None,
    };
    config.apply_env(env).unwrap();
    if let Some(url) = database_url.filter(|v| !v.is_empty()) {
        assert_eq!(config.database_url.expose(), url);
    }
    if let Some(url) = redis_url.filter(|v| !v.is_empty()) {
        assert_eq!(config.redis_url.as_ref().map(|u| u.expose()), Some(url));
    }
    if let Some(s) = secret.filter(|v| !v.is_empty()) {
        assert_eq!(config.secret.as_ref().map(|s| s.expose()), Some(s));
    }
    // The secret never shows: Debug reads the same under any other secret.
    let mut other = config.clone();
    other.secret = config.secret.as_ref().map(|_| limit_store::SecretString::from("another secret altogether"));
    assert_eq!(format!("{config:?}"), format!("{other:?}"), "Debug shows the secret");
    // Whatever parsed builds limits or answers a named error; never a panic.
    let built = config.apply(Limits::builder().store(Arc::new(MemoryStore::new()))).build();
    if let Err(e) = built {
        assert!(!e.to_string().is_empty());
    }
}
