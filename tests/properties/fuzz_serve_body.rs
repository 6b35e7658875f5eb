//! The proptest twin of the `serve_body` fuzz target
//! (`fuzz/fuzz_targets/serve_body.rs`): the same properties
//! (`properties/serve_body.rs`) on generated bodies: good ones, near misses
//! (a missing part, a number for a string, an extra field), and bytes.

#[path = "serve_body.rs"]
mod serve_body;

use proptest::prelude::*;
use serde_json::{json, Map, Value};

fn part_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => "[a-z@.0-9:]{0,12}".prop_map(Value::from),
        1 => Just(json!(7)),
        1 => Just(Value::Null),
        1 => Just(json!(["a"])),
        1 => (1020usize..1030).prop_map(|n| Value::from("x".repeat(n))),
    ]
}

/// A `keys` object: some of the parts of every preset, and others.
fn keys() -> impl Strategy<Value = Value> {
    let names = prop::sample::select(vec!["account", "ip", "destination", "code", "client", "other", ""]);
    prop::collection::btree_map(names, part_value(), 0..4)
        .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect::<Map<_, _>>()))
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => keys().prop_map(|k| json!({ "keys": k }).to_string().into_bytes()),
        1 => keys().prop_map(|k| json!({ "keys": k, "extra": 1 }).to_string().into_bytes()),
        1 => prop::sample::select(vec!["", "  ", "{", "[]", "null", "{\"keys\": []}", "{\"keys\": {\"ip\": \"1\"}}x"])
            .prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..64),
        1 => (16_380usize..16_400).prop_map(|n| format!("{{\"keys\": {{\"code\": \"{}\"}}}}", "c".repeat(n)).into_bytes()),
    ]
}

proptest! {
    #[test]
    fn every_body_gets_a_documented_answer(
        attempt in any::<bool>(),
        limit in 0..serve_body::LIMITS.len(),
        content_type in 0..serve_body::CONTENT_TYPES.len(),
        body in body(),
    ) {
        thread_local! {
            static SERVICE: std::cell::RefCell<serve_body::Service> = std::cell::RefCell::new(serve_body::Service::new());
        }
        SERVICE.with(|s| s.borrow_mut().check(&serve_body::Input { attempt, limit, content_type, body: &body }));
    }
}
