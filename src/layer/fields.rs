//! The RateLimit fields of a layer's admitted answers, written without
//! building their text anew: `RateLimit-Policy` is the same on every answer
//! of the limit, so it is made once and shared; `RateLimit` is written once,
//! into a buffer of its length that the value keeps. Byte for byte what
//! [`fields`](crate::ratelimit_fields::fields) writes.

use std::sync::OnceLock;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::ratelimit_fields::{fields, policy_name, Numbers};
use crate::Decision;

const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The fields of one limit's admitted answers. The layer counts one part, so
/// the policy's name is the limit's alone.
#[derive(Clone, Debug)]
pub(crate) struct AdmittedFields {
    limit: String,
    /// The quoted policy name.
    name: String,
    /// `RateLimit-Policy` for the budget and window (ms) it was made for.
    policy: OnceLock<(u64, i64, HeaderValue)>,
}

/// An admitted answer's `RateLimit-Policy` and `RateLimit` values.
#[derive(Debug)]
pub(crate) struct Values {
    policy: HeaderValue,
    ratelimit: HeaderValue,
}

impl AdmittedFields {
    /// The fields of limit `limit`, which counts one part.
    pub(crate) fn new(limit: &str) -> Self {
        AdmittedFields { limit: limit.to_owned(), name: policy_name(limit, 1, ""), policy: OnceLock::new() }
    }

    /// The values for an allowed `decision`.
    pub(crate) fn values(&self, decision: &Decision) -> Values {
        let numbers = Numbers::from(decision);
        let made = || (decision.budget, decision.window, self.policy_value(decision.budget, numbers.window));
        let (budget, window, policy) = self.policy.get_or_init(made);
        let policy = if (*budget, *window) == (decision.budget, decision.window) {
            policy.clone()
        } else {
            self.policy_value(decision.budget, numbers.window)
        };
        let ratelimit = self.value(b";r=", decision.remaining, b";t=", numbers.t).unwrap_or_else(|| {
            let text = fields(&self.limit, 1, decision).ratelimit;
            HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
        });
        Values { policy, ratelimit }
    }

    fn policy_value(&self, budget: u64, window: i64) -> HeaderValue {
        self.value(b";q=", budget, b";w=", window).unwrap_or_else(|| {
            let text = format!("{};q={budget};w={window}", self.name);
            HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
        })
    }

    /// `name` `a` `x` `b` `y`, written once into a buffer of its exact
    /// length, which the value then holds as it is (no copy, no second
    /// allocation); `None` when it is not a valid value.
    fn value(&self, a: &[u8], x: u64, b: &[u8], y: i64) -> Option<HeaderValue> {
        let (mut x_digits, mut y_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
        let (x, y_text) = (x_digits.format(x).as_bytes(), y_digits.format(y.unsigned_abs()).as_bytes());
        let sign: &[u8] = if y < 0 { b"-" } else { b"" };
        let pieces = [self.name.as_bytes(), a, x, b, sign, y_text];
        let mut out = Vec::with_capacity(pieces.iter().map(|p| p.len()).sum());
        for piece in pieces {
            out.extend_from_slice(piece);
        }
        HeaderValue::from_maybe_shared(Bytes::from(out)).ok()
    }
}

impl Values {
    /// Appends the values to `headers`, as
    /// [`RateLimitFields::write_to`](crate::ratelimit_fields::RateLimitFields::write_to) does.
    pub(crate) fn write_to(self, headers: &mut HeaderMap) {
        headers.reserve(2);
        headers.append(POLICY, self.policy);
        headers.append(RATELIMIT, self.ratelimit);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn decision(budget: u64, remaining: u64, window: i64, reset_in: i64) -> Decision {
        Decision {
            allowed: true,
            remaining,
            reset_at: 1_000_000 + reset_in,
            retry_after: Some(Duration::from_millis(5)).filter(|_| remaining == 0),
            budget,
            part: "ip",
            window,
            now: 1_000_000,
            limited_by: None,
            degraded: None,
            shadow_refused: false,
            others: None,
        }
    }

    /// The fields as the layer writes them and as `fields` does, for `limit`.
    fn both(limit: &str, admitted: &AdmittedFields, d: &Decision) -> (HeaderMap, HeaderMap) {
        let mut ours = HeaderMap::new();
        admitted.values(d).write_to(&mut ours);
        let mut theirs = HeaderMap::new();
        fields(limit, 1, d).write_to(&mut theirs);
        (ours, theirs)
    }

    #[test]
    fn shared_policy_and_written_numbers_are_the_fields_fields_writes() {
        let long = "l".repeat(200);
        for limit in ["per-ip", "a\"b\\c", long.as_str()] {
            let admitted = AdmittedFields::new(limit);
            for d in [
                decision(100, 99, 60_000, 600),
                decision(100, 0, 60_000, 59_001),
                // The policy made for the first decision is not another's.
                decision(u64::MAX, u64::MAX, i64::MAX, i64::MAX - 1_000_000),
                decision(7, 3, 1, -5),
                decision(100, 12, 60_000, 0),
                decision(100, 12, 1_500, 10_000_000_000),
            ] {
                let (ours, theirs) = both(limit, &admitted, &d);
                assert_eq!(ours, theirs, "{limit}: {d:?}");
            }
        }
    }
}
