//! The proptest twin of the `config` fuzz target (`fuzz/fuzz_targets/config.rs`):
//! the same properties (`properties/config.rs`) on generated settings files
//! built from the file's own keys and values, good and bad.

#[path = "config.rs"]
mod config;

use proptest::prelude::*;

/// A line of a settings file: a table header, a key with a value, or noise.
fn line() -> impl Strategy<Value = String> {
    let tables = prop::sample::select(vec![
        "[rate_limit]",
        "[rate_limit.limits.sign-in]",
        "[rate_limit.limits.sign-in.ip]",
        "[rate_limit.limits.sign-in.account]",
        "[rate_limit.limits.api]",
        "[rate_limit.limits.code-sent.destination]",
        "[rate_limit.limits.nope]",
        "[other]",
        "[[rate_limit]]",
    ]);
    let keys = prop::sample::select(vec![
        "store",
        "database_url",
        "redis_url",
        "table",
        "single_instance",
        "max_entries",
        "durable_commits",
        "secret",
        "deadline",
        "max_in_flight",
        "ipv6_prefix",
        "fold_case",
        "budget",
        "window",
        "policy",
        "shadow",
        "limits",
        "ip",
        "bogus",
    ]);
    let values = prop::sample::select(vec![
        "\"memory\"",
        "\"database\"",
        "\"redis\"",
        "\"mongo\"",
        "\"allow\"",
        "\"deny\"",
        "true",
        "false",
        "0",
        "1",
        "-1",
        "128",
        "129",
        "300",
        "18446744073709551615",
        "9223372036854775807",
        "99999999999999999999",
        "1.5",
        "\"15m\"",
        "\"0s\"",
        "\"1d\"",
        "\"18446744073709551615d\"",
        "\"9223372036854775807ms\"",
        "\"500ms\"",
        "\"1w\"",
        "\"\"",
        "\"sqlite://x.db\"",
        "{}",
        "[]",
        "{ budget = 1 }",
        "\"é\"",
    ]);
    prop_oneof![
        3 => tables.prop_map(str::to_owned),
        6 => (keys, values).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => "[ -~]{0,20}",
    ]
}

fn env() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop_oneof!["", "postgres://u:p@h/db", "[ -~]{0,40}"])
}

proptest! {
    #[test]
    fn a_generated_file_parses_or_names_its_error(
        lines in prop::collection::vec(line(), 0..12),
        env in [env(), env(), env()],
        crlf in any::<bool>(),
    ) {
        let text = lines.join(if crlf { "\r\n" } else { "\n" });
        let env = [env[0].as_deref(), env[1].as_deref(), env[2].as_deref()];
        config::check(&config::Input { text: &text, env });
    }

    #[test]
    fn any_text_parses_or_names_its_error(text in "\\PC{0,200}") {
        config::check(&config::Input { text: &text, env: [None, None, None] });
    }
}
