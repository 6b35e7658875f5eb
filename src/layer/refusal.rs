//! The answers a limit gives instead of the app's: 429 when limited, 503 when
//! the store is unavailable and the limit denies, a 4xx for a request without
//! a key. Each is a [`Refusal`], an [`IntoResponse`], with a body that can be
//! changed ([`RefusalBody`]).

use std::fmt;
use std::sync::Arc;

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::ratelimit_fields::{fields, refusal_status, RateLimitFields};
use crate::{Decision, LimitError};

use crate::log::Kind;

/// What a request without a key gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Refused with this 4xx status (400 by default; 401 suits an API key).
    Reject(StatusCode),
    /// Passed through uncounted, as a request no limit covers.
    Pass,
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Reject(StatusCode::BAD_REQUEST)
    }
}

/// The body of a refusal. The status and the RateLimit fields are set around
/// it whatever it is.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum RefusalBody {
    /// `{"error": "...", "kind": "limited", "limit": "api", "retry_after": 3}`
    /// (the default); `kind` is `limited`, `store-unavailable`,
    /// `missing-key` or `store-failed`, as `serve`'s error bodies.
    #[default]
    Json,
    /// The message as `text/plain`.
    Plain,
    /// A response of the app's own, made from the refusal.
    Custom(Arc<dyn Fn(&Refusal) -> Response + Send + Sync>),
}

impl fmt::Debug for RefusalBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusalBody::Json => "Json",
            RefusalBody::Plain => "Plain",
            RefusalBody::Custom(_) => "Custom(..)",
        })
    }
}

/// A request a limit turned away, ready to answer.
#[derive(Debug)]
pub struct Refusal(Box<Refused>);

/// What a [`Refusal`] holds, boxed so that a `Result<_, Refusal>` stays small.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    kind: &'static str,
    error: String,
    limit: String,
    decision: Option<Decision>,
    fields: Option<RateLimitFields>,
    body: RefusalBody,
}

impl Refusal {
    /// The refusal of `decision` on `limit` (counting `parts` parts), or
    /// `None` when the decision lets the request through.
    pub(crate) fn of_decision(limit: &str, parts: usize, decision: Decision) -> Option<Refusal> {
        let status = refusal_status(&decision)?;
        let fields = fields(limit, parts, &decision);
        let (kind, error) = if status == StatusCode::TOO_MANY_REQUESTS {
            let wait = fields.retry_after.as_deref().unwrap_or("1");
            ("limited", format!("too many requests: try again in {wait} s"))
        } else {
            ("store-unavailable", "the limit store is unavailable and this limit's policy is deny".to_owned())
        };
        Some(Refusal(Box::new(Refused {
            status,
            kind,
            error,
            limit: limit.to_owned(),
            decision: Some(decision),
            fields: Some(fields),
            body: RefusalBody::Json,
        })))
    }

    /// The refusal of a request without a key.
    pub(crate) fn missing_key(limit: &str, status: StatusCode, what: &str) -> Refusal {
        let status = if status.is_client_error() { status } else { StatusCode::BAD_REQUEST };
        Refusal(Box::new(Refused {
            status,
            kind: "missing-key",
            error: format!("the request has no {what}, which limit `{limit}` counts by"),
            limit: limit.to_owned(),
            decision: None,
            fields: None,
            body: RefusalBody::Json,
        }))
    }

    /// The answer to a limit call that failed: 400 for a value the part
    /// can't take, 503 for a store that failed, 500 for a limit misconfigured
    /// in code. Logged as a warning (`kind = "limit-layer-error"`).
    pub(crate) fn of_error(limit: &str, error: &LimitError) -> Refusal {
        let (status, kind) = match error {
            LimitError::BadValue { .. } => (StatusCode::BAD_REQUEST, "bad-key"),
            LimitError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store-failed"),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "misconfigured"),
        };
        if status.is_server_error() {
            tracing::warn!(kind = Kind::LayerError.as_str(), limit, error = %error, "limit call failed");
        }
        Refusal(Box::new(Refused {
            status,
            kind,
            error: error.to_string(),
            limit: limit.to_owned(),
            decision: None,
            fields: None,
            body: RefusalBody::Json,
        }))
    }

    /// Answers with `body` instead of the JSON one.
    #[must_use]
    pub fn with_body(mut self, body: RefusalBody) -> Self {
        self.0.body = body;
        self
    }

    /// The status: 429, 503, or a 4xx.
    pub fn status(&self) -> StatusCode {
        self.0.status
    }

    /// A stable name of why: `limited`, `store-unavailable`, `missing-key`,
    /// `bad-key`, `store-failed`, `misconfigured`.
    pub fn kind(&self) -> &'static str {
        self.0.kind
    }

    /// A message for people.
    pub fn message(&self) -> &str {
        &self.0.error
    }

    /// The limit that refused.
    pub fn limit(&self) -> &str {
        &self.0.limit
    }

    /// The decision, when the limit made one.
    pub fn decision(&self) -> Option<&Decision> {
        self.0.decision.as_ref()
    }
}

impl IntoResponse for Refusal {
    fn into_response(mut self) -> Response {
        let fields = self.0.fields.take();
        let mut response = match &self.0.body {
            RefusalBody::Json => {
                let retry_after = fields.as_ref().and_then(|f| f.retry_after.as_deref()?.parse::<u64>().ok());
                let mut body = json!({"error": self.0.error, "kind": self.0.kind, "limit": self.0.limit});
                if let Some(retry_after) = retry_after {
                    body["retry_after"] = retry_after.into();
                }
                Json(body).into_response()
            }
            RefusalBody::Plain => {
                let mut response = self.0.error.clone().into_response();
                response
                    .headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
                response
            }
            RefusalBody::Custom(make) => make(&self),
        };
        *response.status_mut() = self.0.status;
        if let Some(fields) = fields {
            fields.write_to(response.headers_mut());
        }
        response
    }
}
