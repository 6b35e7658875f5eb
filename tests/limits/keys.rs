//! Values an attacker can vary share one budget: accounts and destinations
//! are folded (every Unicode spelling of a mailbox is one), IPv6 clients count per /64, an IPv4-mapped
//! address as its IPv4 address; an `ip` that is not an address is refused.
//! Each of these is a setting, in code and in `limit-store.toml`.

use std::sync::Arc;

use limit_store::config::Config;
use limit_store::{LimitError, Limits, MemoryStore};

fn limits() -> Limits {
    Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build().unwrap()
}

async fn remaining(limits: &Limits, name: &str, parts: &[(&str, &str)]) -> u64 {
    limits.attempt(name, parts).await.unwrap().remaining
}

#[tokio::test]
async fn one_mailbox_written_two_ways_is_one_account() {
    let limits = limits();
    assert_eq!(remaining(&limits, "password-reset", &[("account", "Ada@Example.com"), ("ip", "192.0.2.1")]).await, 2);
    assert_eq!(remaining(&limits, "password-reset", &[("account", " ada@example.com "), ("ip", "192.0.2.2")]).await, 1);
    // A reset written another way clears the same account.
    limits.reset("sign-in", &[("account", "ADA@example.com")]).await.unwrap();
    let d = limits.attempt("code-sent", &[("destination", "+1 555 0100")]).await.unwrap();
    assert!(d.allowed);
    let d = limits.attempt("code-sent", &[("destination", " +1 555 0100")]).await.unwrap();
    assert!(!d.allowed, "the same destination, within its cooldown");
}

#[tokio::test]
async fn one_ipv6_network_is_one_client_and_a_mapped_ipv4_is_its_ipv4() {
    let limits = limits();
    let ip = |ip: &'static str| [("account", "someone@example.com"), ("ip", ip)];
    assert_eq!(remaining(&limits, "password-reset", &ip("2001:db8:1:2::1")).await, 2);
    assert_eq!(
        remaining(&limits, "password-reset", &[("account", "b@example.com"), ("ip", "2001:db8:1:2:ffff::9")]).await,
        2
    );
    // The account is the tighter part above; look at the ip part alone.
    let custom = Limits::builder()
        .store(Arc::new(MemoryStore::new()))
        .single_instance(true)
        .budget("password-reset", "account", 1000)
        .build()
        .unwrap();
    let by_ip = |limits: &Limits, account: &'static str, ip: &'static str| {
        let limits = limits.clone();
        async move { remaining(&limits, "password-reset", &[("account", account), ("ip", ip)]).await }
    };
    assert_eq!(by_ip(&custom, "a", "2001:db8:1:2::1").await, 19);
    assert_eq!(by_ip(&custom, "b", "2001:db8:1:2:aaaa:bbbb:cccc:dddd").await, 18, "same /64");
    assert_eq!(by_ip(&custom, "c", "2001:db8:1:3::1").await, 19, "another /64");
    assert_eq!(by_ip(&custom, "d", "192.0.2.7").await, 19);
    assert_eq!(by_ip(&custom, "e", "::ffff:192.0.2.7").await, 18, "the mapped address is the IPv4 one");
}

#[tokio::test]
async fn an_ip_that_is_not_an_address_is_refused_clearly() {
    let limits = limits();
    for bad in ["not-an-ip", "", "192.0.2.300"] {
        let err = limits.attempt("sign-in", &[("account", "a@example.com"), ("ip", bad)]).await.unwrap_err();
        assert!(matches!(err, LimitError::BadValue { .. }), "{bad}: {err}");
        assert!(err.to_string().contains("part `ip` of limit `sign-in` takes an IP address"), "{err}");
    }
}

#[tokio::test]
async fn each_rule_can_be_turned_off() {
    let limits = Limits::builder()
        .store(Arc::new(MemoryStore::new()))
        .single_instance(true)
        .fold_case(false)
        .ipv6_prefix(128)
        .budget("password-reset", "account", 1000)
        .build()
        .unwrap();
    assert_eq!(remaining(&limits, "password-reset", &[("account", "Ada@Example.com"), ("ip", "192.0.2.1")]).await, 19);
    let d =
        limits.attempt("password-reset", &[("account", "ada@example.com"), ("ip", "2001:db8:1:2::1")]).await.unwrap();
    assert_eq!(d.remaining, 19, "a new account and a new address");
    let d =
        limits.attempt("password-reset", &[("account", "ada@example.com"), ("ip", "2001:db8:1:2::2")]).await.unwrap();
    assert_eq!(d.remaining, 19, "per address, not per /64");
    let unfolded = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).fold_case(false);
    let unfolded = unfolded.build().unwrap();
    assert_eq!(remaining(&unfolded, "password-reset", &[("account", "Ada@Example.com"), ("ip", "10.0.0.1")]).await, 2);
    let d = unfolded.attempt("password-reset", &[("account", "ada@example.com"), ("ip", "10.0.0.2")]).await.unwrap();
    assert_eq!(d.remaining, 2, "not folded: ada@example.com is an account of its own");
}

#[tokio::test]
async fn the_file_sets_both() {
    let config = Config::parse("[rate_limit]\nipv6_prefix = 128\nfold_case = false\n").unwrap();
    assert_eq!((config.ipv6_prefix, config.fold_case), (Some(128), Some(false)));
    let limits =
        config.apply(Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true)).build().unwrap();
    let a = remaining(&limits, "password-reset", &[("account", "Ada"), ("ip", "2001:db8::1")]).await;
    let b = remaining(&limits, "password-reset", &[("account", "ada"), ("ip", "2001:db8::2")]).await;
    assert_eq!((a, b), (2, 2), "neither folded nor per /64");
    let err = Config::parse("[rate_limit]\nipv6_prefix = 129\n").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("rate_limit.ipv6_prefix"), "{err}");
}

#[tokio::test]
async fn api_clients_and_codes_stay_exact() {
    let limits = limits();
    let a = limits.attempt("code-verify", &[("code", "AbC123")]).await.unwrap().remaining;
    let b = limits.attempt("code-verify", &[("code", "abc123")]).await.unwrap().remaining;
    assert_eq!((a, b), (4, 4));
}

/// Each mailbox with spellings of it that Unicode says are the same once
/// folded (NFKC, full case folding, default-ignorable code points removed,
/// white space trimmed): each row is one account.
const SPELLINGS: &[&[&str]] = &[
    &[
        "ada@example.com",
        "ａｄａ@example.com",
        "ＡＤＡ＠ｅｘａｍｐｌｅ．ｃｏｍ",
        "ad\u{200b}a@example.com",
        "ada\u{00ad}@example.com",
        "\u{feff}ada@example.com",
        "a\u{2060}da@exa\u{034f}mple.com",
        "\u{3000}Ada@Example.com\u{00a0}",
    ],
    &["josé@example.com", "jose\u{0301}@example.com", "JOSÉ@example.com", "JOSE\u{0301}@EXAMPLE.COM"],
    &["sam@example.com", "ſam@example.com", "SAM@example.com", "ſAM@example.com"],
    &["strasse@example.com", "STRASSE@example.com", "straße@example.com", "STRAẞE@example.com"],
    &["οδυσσευσ@example.com", "ΟΔΥΣΣΕΥΣ@example.com", "οδυσσευς@example.com", "Οδυσσευς@Example.com"],
    &["file@example.com", "ﬁle@example.com", "FILE@example.com", "ﬁ\u{200d}le@example.com"],
];

#[tokio::test]
async fn a_locked_account_stays_locked_in_every_spelling_of_its_mailbox() {
    for spellings in SPELLINGS {
        let limits = limits();
        // Five failed sign-ins lock the account (the preset), from five addresses.
        for n in 0..5 {
            let ip = format!("192.0.2.{n}");
            let spelling = spellings[n % spellings.len()];
            assert!(limits.attempt("sign-in", &[("account", spelling), ("ip", &ip)]).await.unwrap().allowed);
        }
        for (n, spelling) in spellings.iter().enumerate() {
            let ip = format!("198.51.100.{n}");
            let d = limits.attempt("sign-in", &[("account", spelling), ("ip", &ip)]).await.unwrap();
            assert!(!d.allowed, "{spelling:?} ({}) opened {:?}", spelling.escape_unicode(), spellings[0]);
        }
        // A reset in any spelling clears the one account.
        limits.reset("sign-in", &[("account", spellings[spellings.len() - 1])]).await.unwrap();
        let d = limits.attempt("sign-in", &[("account", spellings[0]), ("ip", "203.0.113.1")]).await.unwrap();
        assert!(d.allowed, "reset as {:?}", spellings[spellings.len() - 1]);
    }
    // Two mailboxes that only look alike stay two.
    let limits = limits();
    for account in ["ada@example.com", "adа@example.com", "ada@exampie.com", "jose@example.com", "josé@example.com"] {
        assert_eq!(
            remaining(&limits, "password-reset", &[("account", account), ("ip", "192.0.2.1")]).await,
            2,
            "{account}"
        );
    }
}

#[tokio::test]
async fn destinations_fold_as_mailboxes_do() {
    let limits = limits();
    assert!(limits.attempt("code-sent", &[("destination", "ＳＡＭ@example.com")]).await.unwrap().allowed);
    for again in ["ſam@example.com", "sam\u{200b}@example.com", " sam@example.com\u{2003}"] {
        let d = limits.attempt("code-sent", &[("destination", again)]).await.unwrap();
        assert!(!d.allowed, "{again:?}: the same destination, within its cooldown");
    }
}

/// Limits with one limit, `by-account`, of one folded part.
fn by_account() -> Limits {
    use limit_store::limits::{Algorithm, Normalize, Part};
    let part = Part::new("account", Algorithm::fixed_window(1000, std::time::Duration::from_secs(60)));
    let limit = limit_store::Limit::new("by-account").part(part.normalized(Normalize::Folded));
    Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).limit(limit).build().unwrap()
}

#[tokio::test]
async fn a_value_that_folding_makes_long_still_counts_as_one() {
    let limits = by_account();
    // U+FDFA is one code point of 3 bytes and NFKC writes it as 18 of 33:
    // a value under the 1024-byte key limit folds to one over it, hashed.
    for (given, again) in [
        ("\u{fdfa}".repeat(300), "\u{fdfa}".repeat(300)),
        ("\u{fdfa}".repeat(30), format!("\u{200b}{}", "\u{fdfa}".repeat(30))),
        ("ﬃ".repeat(400), "FFI".repeat(400)),
        (format!("{}@example.com", "ß".repeat(500)), format!("{}@EXAMPLE.COM", "SS".repeat(500))),
    ] {
        let first = limits.attempt("by-account", &[("account", &given)]).await.unwrap();
        let second = limits.attempt("by-account", &[("account", &again)]).await.unwrap();
        assert_eq!((first.remaining, second.remaining), (999, 998), "{} bytes", given.len());
    }
}

proptest::proptest! {
    /// Any text, short or past the key limit, is counted, and twice as one
    /// account: folding never panics.
    #[test]
    fn any_text_is_one_account(value in proptest::prelude::any::<String>(), pad in 0..1100usize) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let limits = by_account();
            let value = format!("{}{value}", "a".repeat(pad));
            let first = limits.attempt("by-account", &[("account", &value)]).await.unwrap();
            let second = limits.attempt("by-account", &[("account", &value)]).await.unwrap();
            proptest::prop_assert_eq!((first.remaining, second.remaining), (999, 998));
            Ok(())
        })?;
    }
}
