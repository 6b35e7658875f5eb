//! One `ShouldRateLimit` counted: every rule the request's descriptors match
//! is a part of one atomic [`LimitStore::update`](limit_store::LimitStore::update)
//! over their keys, on the store's clock. The request is allowed only when
//! every rule that enforces (not in shadow mode) has room for its hits; then
//! each rule counts its hits (a shadow rule only when they fit), else none
//! does. Each rule is a fixed window of one unit that opens at its key's
//! first counted hit.

use std::fmt::Write as _;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus, RateLimit};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use sha2::{Digest, Sha256};

use super::rules::{Rule, Rules};
use limit_store::limits::{Algorithm, Outcome};
use limit_store::{update_with, Entry, LimitStore, Millis, StoreError, Write, MAX_KEYS, MAX_KEY_BYTES};

/// Why a request can't be counted: its fault, or the store's.
#[derive(Debug)]
pub enum Problem {
    /// The request is not one the service can answer (gRPC INVALID_ARGUMENT).
    Invalid(String),
    /// The store didn't answer; nothing is known to be counted (UNAVAILABLE).
    Store(StoreError),
}

/// How one descriptor was answered, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answered {
    /// Within its rule's budget (or counted nothing and had room).
    Allowed,
    /// Over its rule's budget.
    OverLimit,
    /// Over a shadow rule's budget: reported, not refused.
    Shadow,
}

/// The answer, and each matched rule with how it answered.
pub struct EnvoyAnswer {
    /// What envoy gets.
    pub response: RateLimitResponse,
    /// For the metrics: each descriptor that matched a counted rule.
    pub answered: Vec<(Arc<Rule>, Answered)>,
}

/// One key of the update: a rule and the hits every descriptor counting on
/// that key adds.
struct Part {
    key: String,
    algorithm: Algorithm,
    cost: u64,
    shadow: bool,
}

/// What one descriptor matched.
enum Slot {
    NoRule,
    Unlimited,
    /// A rule with a budget of 0: every hit is over it; and the
    /// descriptor's hits.
    Closed(Arc<Rule>, u64),
    /// A counted rule, the index of its key among the update's, and the
    /// descriptor's hits.
    Counted(Arc<Rule>, usize, u64),
}

/// The store key of a descriptor: `envoy.` and each of the domain, keys and
/// values with its length before it (so no two descriptors share one), or
/// `envoy#` and the SHA-256 of that when it passes the key limit. Limit
/// names hold neither `.` nor `#`, so these never meet a limit's keys.
pub fn key(domain: &str, descriptor: &RateLimitDescriptor) -> String {
    let mut key = String::from("envoy.");
    let mut push = |text: &str| {
        let _ = write!(key, "{}:{text}", text.len());
    };
    push(domain);
    for entry in &descriptor.entries {
        push(&entry.key);
        push(&entry.value);
    }
    if key.len() <= MAX_KEY_BYTES {
        return key;
    }
    let mut hashed = String::from("envoy#");
    for byte in Sha256::digest(key.as_bytes()) {
        let _ = write!(hashed, "{byte:02x}");
    }
    hashed
}

/// The hits a descriptor adds: its own `hits_addend` when set (0 counts
/// nothing), else the request's (where 0 means unset: 1).
fn hits(request: &RateLimitRequest, descriptor: &RateLimitDescriptor) -> u64 {
    match &descriptor.hits_addend {
        Some(own) => own.value,
        None => u64::from(request.hits_addend.max(1)),
    }
}

/// Counts `request` against `rules` in `store`.
pub async fn count(store: &dyn LimitStore, rules: &Rules, request: &RateLimitRequest) -> Result<EnvoyAnswer, Problem> {
    if request.domain.is_empty() {
        return Err(Problem::Invalid("the request names no domain".into()));
    }
    if request.descriptors.is_empty() {
        return Err(Problem::Invalid("the request has no descriptors".into()));
    }
    if request.descriptors.iter().any(|d| d.is_negative_hits) {
        return Err(Problem::Invalid("is_negative_hits is not supported: hits can't be given back".into()));
    }
    let mut parts: Vec<Part> = Vec::new();
    let mut slots = Vec::with_capacity(request.descriptors.len());
    let mut closed = false;
    for descriptor in &request.descriptors {
        let entries = descriptor.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()));
        let slot = match rules.matching(&request.domain, entries) {
            None => Slot::NoRule,
            Some(rule) if rule.unlimited => Slot::Unlimited,
            Some(rule) => match &rule.algorithm {
                None => {
                    closed |= !rule.shadow;
                    Slot::Closed(rule.clone(), hits(request, descriptor))
                }
                Some(algorithm) => {
                    let key = key(&request.domain, descriptor);
                    let cost = hits(request, descriptor);
                    let at = match parts.iter().position(|p| p.key == key) {
                        Some(at) => {
                            parts[at].cost = parts[at].cost.saturating_add(cost);
                            at
                        }
                        None if parts.len() == MAX_KEYS => return Err(too_many()),
                        None => {
                            let shadow = rule.shadow;
                            parts.push(Part { key, algorithm: algorithm.clone(), cost, shadow });
                            parts.len() - 1
                        }
                    };
                    Slot::Counted(rule.clone(), at, cost)
                }
            },
        };
        slots.push(slot);
    }
    let (allowed, outcomes, now) = if parts.is_empty() {
        (!closed, Vec::new(), 0)
    } else {
        let keys: Vec<&str> = parts.iter().map(|p| p.key.as_str()).collect();
        update_with(store, &keys, |current, now| decide(&parts, current, now, closed)).await.map_err(Problem::Store)?
    };
    Ok(answer(slots, &outcomes, allowed, now))
}

/// A request whose descriptors name more keys than one update takes: refused
/// at the first one over, so a long list costs no more than that.
fn too_many() -> Problem {
    Problem::Invalid(format!("the request's descriptors match more than {MAX_KEYS} counted rules and values"))
}

/// The writes, whether the request is allowed, and each part's outcome:
/// for a refused request, what each part holds now.
fn decide(
    parts: &[Part],
    current: &[Option<Entry>],
    now: Millis,
    closed: bool,
) -> (Vec<Write>, (bool, Vec<Outcome>, Millis)) {
    let outcomes: Vec<Outcome> =
        parts.iter().zip(current).map(|(p, e)| p.algorithm.check_cost(e.as_ref(), now, p.cost)).collect();
    let allowed = !closed && parts.iter().zip(&outcomes).all(|(p, o)| p.shadow || o.allowed);
    if allowed {
        let writes = outcomes.iter().map(|o| o.write.clone()).collect();
        return (writes, (true, outcomes, now));
    }
    let now_held = parts
        .iter()
        .zip(current)
        .zip(outcomes)
        .map(|((p, e), o)| if o.allowed { p.algorithm.check_cost(e.as_ref(), now, 0) } else { o })
        .collect();
    (vec![Write::Keep; parts.len()], (false, now_held, now))
}

/// The response: one status per descriptor, in order. A descriptor of 0
/// hits is a check: answered, and left out of the metrics, as an attempt
/// of cost 0 is left out of a limit's counters.
fn answer(slots: Vec<Slot>, outcomes: &[Outcome], allowed: bool, now: Millis) -> EnvoyAnswer {
    let mut answered = Vec::new();
    let statuses = slots
        .into_iter()
        .map(|slot| match slot {
            Slot::NoRule => DescriptorStatus { code: Code::Ok.into(), ..Default::default() },
            Slot::Unlimited => {
                DescriptorStatus { code: Code::Ok.into(), limit_remaining: u32::MAX, ..Default::default() }
            }
            Slot::Closed(rule, hits) => {
                let said = if rule.shadow { Answered::Shadow } else { Answered::OverLimit };
                let status = status(&rule, said, 0, millis(rule.unit.duration()));
                if hits != 0 {
                    answered.push((rule, said));
                }
                status
            }
            Slot::Counted(rule, at, hits) => {
                let o = &outcomes[at];
                let said = match (o.allowed, rule.shadow) {
                    (true, _) => Answered::Allowed,
                    (false, true) => Answered::Shadow,
                    (false, false) => Answered::OverLimit,
                };
                let status = status(&rule, said, o.remaining, o.reset_at.saturating_sub(now));
                if hits != 0 {
                    answered.push((rule, said));
                }
                status
            }
        })
        .collect();
    let overall = if allowed { Code::Ok } else { Code::OverLimit };
    EnvoyAnswer {
        response: RateLimitResponse { overall_code: overall.into(), statuses, ..Default::default() },
        answered,
    }
}

fn millis(d: std::time::Duration) -> Millis {
    Millis::try_from(d.as_millis()).unwrap_or(Millis::MAX)
}

/// A matched rule's status. A shadow rule over its budget says OK, as
/// envoy's own service does, with what is left (0).
fn status(rule: &Rule, said: Answered, remaining: u64, reset_in: Millis) -> DescriptorStatus {
    let code = if said == Answered::OverLimit { Code::OverLimit } else { Code::Ok };
    let reset_in = reset_in.max(0);
    DescriptorStatus {
        code: code.into(),
        current_limit: Some(RateLimit {
            name: rule.name.clone().unwrap_or_default(),
            requests_per_unit: rule.requests_per_unit,
            unit: rule.unit.proto().into(),
        }),
        limit_remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(ProtoDuration {
            seconds: reset_in / 1_000,
            // Under 1e9: a whole number of milliseconds under a second.
            nanos: i32::try_from(reset_in % 1_000 * 1_000_000).unwrap_or(0),
        }),
        quota: None,
    }
}

#[cfg(test)]
mod tests {
    use super::key;

    #[test]
    fn keys_are_one_per_descriptor_and_long_ones_are_hashed() {
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
        let descriptor = |entries: &[(&str, &str)]| RateLimitDescriptor {
            entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
            ..Default::default()
        };
        let a = key("d", &descriptor(&[("a", "b:c")]));
        let b = key("d", &descriptor(&[("a:b", "c")]));
        let c = key("d:a", &descriptor(&[("b", "c")]));
        let d = key("d", &descriptor(&[("a", "b"), ("c", "")]));
        assert!([&b, &c, &d].iter().all(|k| **k != a) && b != c && c != d && b != d, "{a} {b} {c} {d}");
        let long = key("d", &descriptor(&[("k", &"v".repeat(2_000))]));
        assert!(long.starts_with("envoy#") && long.len() == 6 + 64, "{long}");
    }

    /// A descriptor of 0 hits is a check: answered with what its rule
    /// holds, and left out of the metrics; one of 1 hit is counted there.
    #[tokio::test]
    async fn checks_are_answered_and_left_out_of_the_metrics() {
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
        use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

        let rules = super::Rules::parse(
            "domain: site\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, requests_per_unit: 5}\n  \
             - key: closed\n    rate_limit: {unit: minute, requests_per_unit: 0}\n",
            "test",
        )
        .unwrap();
        let store = limit_store::MemoryStore::new();
        let request = |key: &str, hits: u64| RateLimitRequest {
            domain: "site".into(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![Entry { key: key.into(), value: "v".into() }],
                hits_addend: Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits }),
                ..Default::default()
            }],
            ..Default::default()
        };
        for key in ["ip", "closed"] {
            let check = super::count(&store, &rules, &request(key, 0)).await.unwrap();
            assert_eq!(check.response.statuses.len(), 1);
            assert!(check.answered.is_empty(), "{key}: a check is not in the metrics");
            let counted = super::count(&store, &rules, &request(key, 1)).await.unwrap();
            assert_eq!(counted.answered.len(), 1, "{key}: a hit is");
        }
        let after = super::count(&store, &rules, &request("ip", 0)).await.unwrap();
        assert_eq!(after.response.statuses[0].limit_remaining, 4, "the check counted nothing");
    }
}
