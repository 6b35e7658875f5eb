//! The JSON bodies of the API, as types: the handlers answer with them and
//! the OpenAPI document (`GET /openapi.json`) is generated from them.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

/// The body of a reset: the value of each part of the limit.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct KeysBody {
    /// `{"account": "ada@example.com", "ip": "192.0.2.7"}`: one string per part.
    pub keys: BTreeMap<String, String>,
}

/// The body of an attempt: the value of each part, and what it costs.
#[derive(Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct AttemptBody {
    /// `{"account": "ada@example.com", "ip": "192.0.2.7"}`: one string per part.
    pub keys: BTreeMap<String, String>,
    /// How much the attempt counts at once on every part (default 1): allowed
    /// only when all of it fits. 0 counts nothing and answers what an attempt
    /// would (a check). A cost over a part's budget is refused (422
    /// `cost-over-budget`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, example = 3)]
    pub cost: Option<u64>,
}

/// The answer to an attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionBody {
    /// Go ahead.
    pub allowed: bool,
    /// Attempts left on the part with the fewest.
    pub remaining: u64,
    /// When that part has more budget (ms since the Unix epoch, on the store's clock).
    pub reset_at: i64,
    /// The budget of the part that answered.
    pub budget: u64,
    /// The part that answered.
    pub part: &'static str,
    /// For a limited attempt: the part that ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limited_by: Option<&'static str>,
    /// For a limited attempt: how long until one would be allowed (ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// The store was unavailable and the limit's policy answered: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// Shadow mode let through an attempt it would have refused.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub shadow_refused: bool,
    /// What each part has left, one per part in the limit's order: after an
    /// allowed attempt, once it counted; after a refusal or a check, now.
    /// With a degraded answer nothing is known: 0 left on each.
    pub parts: Vec<PartLeftBody>,
    /// With a 503: `store-unavailable`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// With a 503: what happened.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'static str>,
}

/// What one part of a limit has left, in an attempt's answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct PartLeftBody {
    /// The part.
    pub part: &'static str,
    /// Its budget.
    pub budget: u64,
    /// What is left of it.
    pub remaining: u64,
    /// When it next has more (ms since the Unix epoch, on the store's clock).
    pub reset_at: i64,
}

/// Every answer that is not a decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What is wrong and what to send instead.
    pub error: String,
    /// A stable name of the error (`unknown-limit`, `invalid-json`, …).
    pub kind: String,
}

/// The limits, from `GET /v1/limits`.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitsBody {
    /// Every limit, by name.
    pub limits: Vec<LimitBody>,
}

/// One limit.
#[derive(Debug, Serialize, ToSchema)]
pub struct LimitBody {
    /// Its name.
    pub name: String,
    /// Its parts, in the order their keys are counted.
    pub parts: Vec<PartBody>,
    /// `allow` or `deny` when the store is unavailable.
    pub policy: String,
    /// Shadow mode: counts, refuses nothing.
    pub shadow: bool,
    /// True for a preset, false for a limit of the site's (or app's) own.
    pub preset: bool,
}

/// One part of a limit.
#[derive(Debug, Serialize, ToSchema)]
pub struct PartBody {
    /// Its name.
    pub name: String,
    /// `fixed-window`, `sliding-window`, `lockout` or `gcra`.
    pub algorithm: String,
    /// Attempts per window.
    pub budget: u64,
    /// The window (ms).
    pub window_ms: i64,
    /// Whether a reset clears it.
    pub cleared_by_reset: bool,
    /// How long a lockout locks (ms); absent for the other algorithms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_ms: Option<i64>,
    /// How values are made one before they are counted: `exact`, `folded` or `ip`.
    pub normalize: String,
    /// How many values have a budget of their own (`[...PART.overrides]`).
    pub overrides: usize,
}

/// The answer of `GET /healthz` when the store answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthBody {
    /// `ok`.
    pub status: String,
}
