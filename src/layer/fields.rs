//! The RateLimit fields of a layer's admitted answers, written without
//! building their text anew: `RateLimit-Policy` is the same on every answer
//! of the limit, so it is made once and shared; `RateLimit` is written on the
//! stack. Byte for byte what [`fields`](crate::ratelimit_fields::fields) writes.

use std::sync::OnceLock;

use arrayvec::ArrayVec;
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
        let numbers = Numbers::of(decision);
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

    /// `name` `a` `x` `b` `y`, when it fits on the stack.
    fn value(&self, a: &[u8], x: u64, b: &[u8], y: i64) -> Option<HeaderValue> {
        let mut out = ArrayVec::<u8, 160>::new();
        out.try_extend_from_slice(self.name.as_bytes()).ok()?;
        out.try_extend_from_slice(a).ok()?;
        push_int(&mut out, x, false).ok()?;
        out.try_extend_from_slice(b).ok()?;
        push_int(&mut out, y.unsigned_abs(), y < 0).ok()?;
        HeaderValue::from_bytes(&out).ok()
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

/// `n` in decimal (after a `-` when `negative`), as `Display` writes it.
fn push_int<const N: usize>(out: &mut ArrayVec<u8, N>, n: u64, negative: bool) -> Result<(), ()> {
    if negative {
        out.try_push(b'-').map_err(drop)?;
    }
    out.try_extend_from_slice(itoa::Buffer::new().format(n).as_bytes()).map_err(drop)
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
    fn shared_policy_and_stack_numbers_are_the_fields_fields_writes() {
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

    #[test]
    fn integers_are_written_as_display_writes_them() {
        for (n, negative) in [(0, false), (7, false), (10, false), (u64::MAX, false), (5, true), (1 << 63, true)] {
            let mut out = ArrayVec::<u8, 32>::new();
            push_int(&mut out, n, negative).unwrap();
            let expected = if negative { format!("-{n}") } else { n.to_string() };
            assert_eq!(std::str::from_utf8(&out).unwrap(), expected);
        }
    }
}
