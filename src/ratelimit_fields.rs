//! The `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers (its structured-field form), and
//! `Retry-After`, from a [`Decision`]: written once, for `serve` and for any
//! HTTP layer in front of a limit.
//!
//! ```text
//! RateLimit-Policy: "sign-in";q=5;w=900
//! RateLimit: "sign-in";r=0;t=720
//! Retry-After: 720
//! ```
//!
//! `q` is the quota (the budget of the part that answered), `w` its window in
//! seconds, `r` what is left, `t` the seconds until it has more. The policy's
//! name is the limit's, with the part after a `/` when the limit counts more
//! than one (`"sign-in/ip"`), so a client can tell which ran out.
//!
//! [`fields`] writes them whole. An HTTP layer that writes them itself (to
//! make a limit's name once, not on every answer) takes the name from
//! [`policy_name`] and each decision's numbers from [`Numbers`]; a refused
//! decision is answered with [`refusal_status`].

use crate::{Decision, Millis};

/// The header fields of one answer.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RateLimitFields {
    /// The `RateLimit-Policy` field.
    pub policy: String,
    /// The `RateLimit` field.
    pub ratelimit: String,
    /// The `Retry-After` field (whole seconds, rounded up), for a limited answer.
    pub retry_after: Option<String>,
}

/// The fields for `decision` on limit `limit`, which counts `parts` parts.
pub fn fields(limit: &str, parts: usize, decision: &Decision) -> RateLimitFields {
    use std::fmt::Write as _;
    let name = policy_name(limit, parts, decision.part);
    let Numbers { window, t, retry, .. } = Numbers::from(decision);
    let mut policy = String::with_capacity(name.len() + 24);
    policy.push_str(&name);
    let _ = write!(policy, ";q={};w={window}", decision.budget);
    let mut ratelimit = name;
    let _ = write!(ratelimit, ";r={};t={t}", decision.remaining);
    RateLimitFields { policy, ratelimit, retry_after: retry.map(|r| t.max(r).to_string()) }
}

/// The name of the policy of limit `limit`, which counts `parts` parts,
/// when part `part` answered: a quoted string (`"sign-in"`), the limit's,
/// with the part after a `/` when the limit counts more than one
/// (`"sign-in/ip"`). Both fields start with it.
pub fn policy_name(limit: &str, parts: usize, part: &str) -> String {
    let mut name = String::with_capacity(limit.len() + part.len() + 24);
    name.push('"');
    push_sf(&mut name, limit);
    if parts > 1 {
        name.push('/');
        push_sf(&mut name, part);
    }
    name.push('"');
    name
}

/// The numbers of the fields of one decision, in seconds (whole, rounded up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Numbers {
    /// `w`: the window.
    pub window: i64,
    /// `t`: until the part has more; for a refused decision, never before
    /// `Retry-After`.
    pub t: i64,
    /// `Retry-After`, for a decision that is not allowed.
    pub retry: Option<i64>,
}

/// The numbers of `decision`.
impl From<&Decision> for Numbers {
    fn from(decision: &Decision) -> Self {
        let window = seconds_up(decision.window);
        let reset = seconds_up(decision.reset_at.saturating_sub(decision.now));
        let retry = decision.retry_after.map(|d| seconds_up(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
        // Retry-After never names a time before the reset the field announces.
        let t = match retry {
            Some(retry) if !decision.allowed => reset.max(retry),
            _ => reset,
        };
        Numbers { window, t, retry: retry.filter(|_| !decision.allowed) }
    }
}

#[cfg(feature = "axum")]
impl RateLimitFields {
    /// Writes the fields into `headers`. `RateLimit-Policy` and `RateLimit`
    /// are appended, so the answers of stacked limits list every policy;
    /// `Retry-After` is set.
    pub fn write_to(self, headers: &mut axum::http::HeaderMap) {
        use axum::body::Bytes;
        use axum::http::{header, HeaderName, HeaderValue};
        const POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
        const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
        // The names are quoted printable ASCII, so every value is valid; the
        // text moves into the value uncopied.
        let value = |text: String| HeaderValue::from_maybe_shared(Bytes::from(text));
        headers.reserve(3);
        if let Ok(value) = value(self.policy) {
            headers.append(POLICY, value);
        }
        if let Ok(value) = value(self.ratelimit) {
            headers.append(RATELIMIT, value);
        }
        if let Some(Ok(value)) = self.retry_after.map(value) {
            headers.insert(header::RETRY_AFTER, value);
        }
    }
}

/// The status of a refused decision: 429 when it ran out of budget, 503 when
/// the store was unavailable and the limit's policy denies; `None` when the
/// attempt may go ahead.
#[cfg(feature = "axum")]
pub fn refusal_status(decision: &Decision) -> Option<axum::http::StatusCode> {
    use axum::http::StatusCode;
    match (decision.allowed, decision.degraded) {
        (true, _) => None,
        (false, Some(_)) => Some(StatusCode::SERVICE_UNAVAILABLE),
        (false, None) => Some(StatusCode::TOO_MANY_REQUESTS),
    }
}

/// Milliseconds as whole seconds, rounded up, never negative.
fn seconds_up(ms: Millis) -> i64 {
    let ms = ms.max(0);
    ms / 1_000 + i64::from(ms % 1_000 != 0)
}

/// `s` as the inside of a structured-field string, with `"` and `\`
/// escaped. Limit and part names are printable ASCII, which is all a string
/// may hold.
fn push_sf(out: &mut String, s: &str) {
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_round_up() {
        assert_eq!([0, 1, 999, 1_000, 1_001, -5].map(seconds_up), [0, 1, 1, 1, 2, 0]);
    }

    #[test]
    fn names_are_quoted_and_escaped() {
        let sf = |s: &str| {
            let mut out = String::new();
            push_sf(&mut out, s);
            out
        };
        assert_eq!(sf("sign-in"), "sign-in");
        assert_eq!(sf("a\"b\\c\u{e9}"), "a\\\"b\\\\c");
    }
}
