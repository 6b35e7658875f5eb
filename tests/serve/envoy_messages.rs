//! An outsider's calls to `serve --grpc-listen` (Envoy's rate limit
//! service), against the real binary: messages over the limit, compressed,
//! or not a `RateLimitRequest`, or never sent; methods it does not have;
//! thousands of descriptors; the largest hits; odd domains, keys and values;
//! the token sent wrong. Each gets a status that says what to do, counts
//! nothing it should not, and the process goes on answering.

use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use envoy_types::pb::google::protobuf::UInt64Value;
use prost::Message;

use super::envoy_wire::{answered_within, call, call_at, call_raw, connect, frame, head, request, start, Answer, PATH};
use crate::common::db::rand_suffix;

const INVALID_ARGUMENT: i32 = 3;
const RESOURCE_EXHAUSTED: i32 = 8;
const UNIMPLEMENTED: i32 = 12;
const UNAUTHENTICATED: i32 = 16;
/// `Code::OverLimit` in a response.
const OVER_LIMIT: i32 = 2;

fn refused(answer: Answer, code: i32, words: &str) {
    assert_eq!(answer.code, code, "{answer:?}");
    assert!(answer.message.contains(words), "expected {words:?} in {answer:?}");
}

/// What a fresh `tight` (2 an hour) value has left after a check.
async fn tight_left(send: &h2::client::SendRequest<Bytes>, meta: &[(&str, &str)], value: &str) -> u32 {
    let mut check = request("test", &[&[("tight", value)]]);
    check.descriptors[0].hits_addend = Some(UInt64Value { value: 0 });
    call(send, meta, &check).await.ok().statuses[0].limit_remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_over_the_limit_compressed_or_not_a_request_are_refused_saying_why() {
    let envoy = start(&[], None).await;
    let send = connect(&envoy.grpc).await;
    // Just over 64 KiB, and a length prefix of 4 GiB with nothing after it.
    let over = request("test", &[&[("roomy", &"v".repeat(64 * 1024))]]).encode_to_vec();
    refused(call_raw(&send, &[], frame(&over)).await, RESOURCE_EXHAUSTED, "65536");
    let started = Instant::now();
    let huge = Bytes::from_static(&[0, 0xff, 0xff, 0xff, 0xff]);
    refused(call_raw(&send, &[], huge).await, RESOURCE_EXHAUSTED, "65536");
    assert!(started.elapsed() < Duration::from_secs(1), "refused from the prefix, without waiting for 4 GiB");
    // Compressed: a gzip bomb is never inflated.
    let bomb = Bytes::from([&[1u8, 0, 0, 0, 32][..], &[0x1f; 32]].concat());
    refused(call_raw(&send, &[("grpc-encoding", "gzip")], bomb.clone()).await, UNIMPLEMENTED, "gzip");
    let answer = call_raw(&send, &[], bomb).await;
    // tonic's own INTERNAL, which says what is wrong.
    refused(answer, 13, "compressed-flag but no grpc-encoding");
    // Not a RateLimitRequest: bad wire bytes; a string that is not UTF-8.
    for body in [vec![0xff; 10], vec![0x0a, 0x02, 0xff, 0xfe], vec![0x12, 0x05, 0x0a]] {
        refused(call_raw(&send, &[], frame(&body)).await, INVALID_ARGUMENT, "RateLimitRequest");
    }
    // Methods it does not have.
    let message = frame(&request("test", &[&[("roomy", "x")]]).encode_to_vec());
    let other = "/envoy.service.ratelimit.v3.RateLimitService/Other";
    refused(call_at(&send, other, &[], message.clone()).await, UNIMPLEMENTED, "ShouldRateLimit only");
    refused(call_at(&send, "/x.Y/Z", &[], message).await, UNIMPLEMENTED, "");
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_rules_cannot_count_are_refused_and_count_nothing() {
    let envoy = start(&[], None).await;
    let send = connect(&envoy.grpc).await;
    refused(call(&send, &[], &request("", &[&[("tight", "a")]])).await, INVALID_ARGUMENT, "domain");
    refused(call(&send, &[], &request("test", &[])).await, INVALID_ARGUMENT, "descriptors");
    let mut negative = request("test", &[&[("tight", "a")]]);
    negative.descriptors[0].is_negative_hits = true;
    refused(call(&send, &[], &negative).await, INVALID_ARGUMENT, "is_negative_hits");
    // 33 values of counted rules: more keys than one update takes.
    let tag = rand_suffix();
    let values: Vec<String> = (0..33).map(|i| format!("many-{tag}-{i}")).collect();
    let pairs: Vec<[(&str, &str); 1]> = values.iter().map(|v| [("tight", v.as_str())]).collect();
    let descriptors: Vec<&[(&str, &str)]> = pairs.iter().map(|p| &p[..]).collect();
    refused(call(&send, &[], &request("test", &descriptors)).await, INVALID_ARGUMENT, "32");
    assert_eq!(tight_left(&send, &[], &values[0]).await, 2, "nothing counted");
    // The largest hits: over any budget, counted nowhere, no overflow.
    let value = format!("hits-{tag}");
    let mut most = request("test", &[&[("tight", &value)], &[("roomy", &value)]]);
    most.hits_addend = u32::MAX;
    let response = call(&send, &[], &most).await.ok();
    assert_eq!(response.overall_code, OVER_LIMIT);
    most.hits_addend = 0;
    most.descriptors[1].hits_addend = Some(UInt64Value { value: u64::MAX });
    assert_eq!(call(&send, &[], &most).await.ok().overall_code, OVER_LIMIT);
    assert_eq!(tight_left(&send, &[], &value).await, 2, "nothing counted");
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_values_and_thousands_of_descriptors_are_answered_one_status_each() {
    let envoy = start(&[], None).await;
    let send = connect(&envoy.grpc).await;
    // Unknown domain, empty key and value, a key no rule has: OK, no limit.
    for (domain, key, value) in [("nobody", "tight", "a"), ("test", "", ""), ("test", "nokey", "x")] {
        let response = call(&send, &[], &request(domain, &[&[(key, value)]])).await.ok();
        assert_eq!(response.overall_code, 1, "{domain} {key} {value}");
        assert!(response.statuses[0].current_limit.is_none());
    }
    // Odd Unicode and a 60 KB value: a key of its own, counted exactly.
    let tag = rand_suffix();
    let odd = [format!("\u{202e}\u{0}é👍\u{fffd}{tag}"), format!("{tag}{}", "ü".repeat(30_000))];
    for value in &odd {
        let counted = request("test", &[&[("tight", value)]]);
        assert_eq!(call(&send, &[], &counted).await.ok().statuses[0].limit_remaining, 1);
        assert_eq!(call(&send, &[], &counted).await.ok().statuses[0].limit_remaining, 0);
        assert_eq!(call(&send, &[], &counted).await.ok().overall_code, OVER_LIMIT);
    }
    for value in &odd {
        assert_eq!(tight_left(&send, &[], &format!("{value}x")).await, 2, "one more character: a key of its own");
    }
    // The metrics name the rule, never a value a request sent.
    let metrics = envoy.serve.request("GET", "/metrics", &[], b"").await.unwrap().body;
    assert!(metrics.contains(r#"rule="tight",outcome="over_limit"} 2"#), "{metrics}");
    assert!(!metrics.contains(&tag.to_string()) && !metrics.contains('\u{202e}'), "a value in the metrics");
    // As many descriptors as 64 KiB holds: one status each, quickly.
    let pair = [("free", "x")];
    let many: Vec<&[(&str, &str)]> = vec![&pair[..]; 5_000];
    let started = Instant::now();
    let response = call(&send, &[], &request("test", &many)).await.ok();
    assert_eq!(response.statuses.len(), 5_000);
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_token_as_authorization_bearer_passes_and_a_refused_call_counts_nothing() {
    let token = "grpc-attack-token-0123456789abcdef";
    let envoy = start(&[("LIMIT_STORE_API_TOKEN", token)], None).await;
    let send = connect(&envoy.grpc).await;
    let value = format!("auth-{}", rand_suffix());
    let counted = request("test", &[&[("tight", &value)]]);
    let right = format!("Bearer {token}");
    let cases: Vec<Vec<(&str, String)>> = vec![
        vec![],
        vec![("authorization", format!("bearer {token}"))],
        vec![("authorization", format!("Bearer  {token}"))],
        vec![("authorization", format!("Bearer {token} "))],
        vec![("authorization", format!("Bearer {}", &token[..token.len() - 1]))],
        vec![("authorization", format!("Bearer {token}0"))],
        vec![("authorization", token.to_owned())],
        vec![("authorization", "Basic Z3JwYzphdHRhY2s=".to_owned())],
        vec![("authorization-bin", base64::engine::general_purpose::STANDARD.encode(&right))],
        vec![("authorization", "Bearer wrong-token-0123456789abcdef".to_owned()), ("authorization", right.clone())],
        vec![("authorization", right.clone()), ("authorization", right.clone())],
    ];
    for case in &cases {
        let meta: Vec<(&str, &str)> = case.iter().map(|(k, v)| (*k, v.as_str())).collect();
        refused(call(&send, &meta, &counted).await, UNAUTHENTICATED, "authorization: Bearer");
    }
    // Refused before the message is read: an oversized one gets the same answer.
    let over = request("test", &[&[("roomy", &"v".repeat(70_000))]]).encode_to_vec();
    refused(call_raw(&send, &[], frame(&over)).await, UNAUTHENTICATED, "authorization: Bearer");
    let auth = [("authorization", right.as_str())];
    assert_eq!(tight_left(&send, &auth, &value).await, 2, "no refused call counted");
    assert_eq!(call(&send, &auth, &counted).await.ok().statuses[0].limit_remaining, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_message_never_comes_ends_deadline_exceeded() {
    let envoy = start(&[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], None).await;
    let send = connect(&envoy.grpc).await;
    let request_head = head(PATH);
    let started = Instant::now();
    let (response, _stream) = send.clone().ready().await.unwrap().send_request(request_head, false).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(4), response).await.expect("an answer within 4 s").unwrap();
    // A trailers-only answer: the status is in the headers.
    let trailers = response.headers().clone();
    let status = trailers.get("grpc-status").map(|v| v.to_str().unwrap().to_owned());
    assert_eq!(status.as_deref(), Some("4"), "DEADLINE_EXCEEDED: {trailers:?}");
    let message = trailers.get("grpc-message").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    assert!(message.contains("request_timeout"), "{message}");
    assert!(started.elapsed() >= Duration::from_millis(900), "not before the timeout");
    // The connection goes on.
    let value = format!("after-{}", rand_suffix());
    call(&send, &[], &request("test", &[&[("roomy", &value)]])).await.ok();
}
