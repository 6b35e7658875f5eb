//! The routes of the API (SPEC §9): attempt, reset, the list of limits, and
//! health. Bodies are read by hand, so that every way a body can be wrong gets
//! its own 4xx and a message that says what to send.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{Map, Value};

#[allow(unused_imports)] // named in the OpenAPI annotations
use super::bodies::{AttemptBody, ErrorBody, KeysBody};
use super::bodies::{DecisionBody, HealthBody, LimitBody, LimitsBody, PartBody, PartLeftBody};
use super::error::ApiError;
use super::repeated_keys;
use super::App;
use limit_store::ratelimit_fields::{fields, refusal_status};
use limit_store::Decision;

/// The largest body taken, in bytes.
pub(crate) const MAX_BODY: usize = 16 * 1024;

const BODY_SHAPE: &str =
    r#"send {"keys": {"<part>": "<value>", ...}}, e.g. {"keys": {"account": "ada@example.com", "ip": "192.0.2.7"}}"#;

const COST_SHAPE: &str = r#"send "cost" as a whole number of 0 or more (default 1; 0 checks without counting), e.g. {"keys": {"client": "c-1"}, "cost": 3}"#;

/// `POST /v1/limits/{name}/attempt`: 200 allowed, 429 limited, 503 when the
/// store is unavailable and the limit denies, 200 with `degraded` when it
/// allows. `"cost": n` counts n at once (0: a check); every answer carries
/// each part's `parts`.
#[utoipa::path(post, path = "/v1/limits/{name}/attempt", request_body = AttemptBody,
    params(("name" = String, Path, description = "The limit, as `sign-in`")),
    responses(
        (status = 200, description = "Allowed (or degraded and the limit allows)", body = DecisionBody,
            headers(("RateLimit-Policy" = String), ("RateLimit" = String))),
        (status = 429, description = "Limited", body = DecisionBody,
            headers(("Retry-After" = String), ("RateLimit-Policy" = String), ("RateLimit" = String))),
        (status = 503, description = "The store is unavailable and the limit denies", body = DecisionBody),
        (status = 400, description = BAD_REQUEST, body = ErrorBody),
        (status = 404, description = "No such limit", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the request timeout", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 415, description = NOT_JSON, body = ErrorBody),
        (status = 422, description = "A wrong, missing or unknown part; a cost that is not a whole number of 0 or more (`invalid-cost`), or over a part's budget (`cost-over-budget`)", body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 421, description = NOT_LOOPBACK, body = ErrorBody),
    ))]
pub async fn attempt(
    State(app): State<App>,
    LimitName(name): LimitName,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let (parts, cost) = body_of(&headers, body, true)?;
    let refs: Vec<(&str, &str)> = parts.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    let limits = app.limits.current();
    let call = app.metrics.call();
    let decision = limits.attempt_cost(&name, &refs, cost).await;
    drop(call);
    let decision = decision?;
    app.metrics.decided(&name, &decision, cost);
    let count = limits.limit(&name).map_or(1, |l| l.parts().len());
    Ok(answer(&name, count, &decision))
}

/// `POST /v1/limits/{name}/reset`: 204. Clears the counts a success clears:
/// what an attacker would call to lift a lockout, so guard it with the token.
#[utoipa::path(post, path = "/v1/limits/{name}/reset", request_body = KeysBody,
    params(("name" = String, Path, description = "The limit, as `sign-in`")),
    responses(
        (status = 204, description = "Cleared"),
        (status = 400, description = BAD_REQUEST, body = ErrorBody),
        (status = 404, description = "No such limit", body = ErrorBody),
        (status = 408, description = "The body did not arrive within the request timeout", body = ErrorBody),
        (status = 413, description = TOO_LARGE, body = ErrorBody),
        (status = 415, description = NOT_JSON, body = ErrorBody),
        (status = 422, description = "A wrong or unknown part", body = ErrorBody),
        (status = 503, description = "The store is unavailable", body = ErrorBody),
        (status = 401, description = UNAUTHORIZED, body = ErrorBody),
        (status = 421, description = NOT_LOOPBACK, body = ErrorBody),
    ))]
pub async fn reset(
    State(app): State<App>,
    LimitName(name): LimitName,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiError> {
    let parts = parts_of(&headers, body)?;
    let refs: Vec<(&str, &str)> = parts.iter().map(|(p, v)| (p.as_str(), v.as_str())).collect();
    app.limits.current().reset(&name, &refs).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/limits`: every limit (presets and the site's own) with its
/// parts, algorithms, budgets, windows, policy and how many values have
/// budgets of their own.
#[utoipa::path(get, path = "/v1/limits", responses(
    (status = 200, description = "The limits", body = LimitsBody),
    (status = 400, description = REPEATED_HEADER, body = ErrorBody),
    (status = 401, description = UNAUTHORIZED, body = ErrorBody),
    (status = 421, description = NOT_LOOPBACK, body = ErrorBody),
))]
pub async fn list(State(app): State<App>) -> Json<LimitsBody> {
    let current = app.limits.current();
    let limits = current
        .names()
        .iter()
        .filter_map(|name| current.limit(name))
        .map(|limit| LimitBody {
            name: limit.name().to_owned(),
            parts: limit
                .parts()
                .iter()
                .map(|p| PartBody {
                    name: p.name().to_owned(),
                    algorithm: p.algorithm().to_string(),
                    budget: p.algorithm().budget(),
                    window_ms: p.algorithm().window(),
                    cleared_by_reset: p.cleared_by_reset(),
                    lock_ms: match *p.algorithm() {
                        limit_store::limits::Algorithm::Lockout { lock, .. } => Some(lock),
                        _ => None,
                    },
                    normalize: p.normalize().to_string(),
                    overrides: p.overrides().count(),
                })
                .collect(),
            policy: limit.unavailable_policy().to_string(),
            shadow: limit.is_shadow(),
            preset: limit_store::limits::presets::named(limit.name()).is_some(),
        })
        .collect();
    Json(LimitsBody { limits })
}

/// `GET /healthz`: 200 when the store answers, 503 when not. At most one
/// probe of the store runs at once, beneath its guard, and its answer is
/// reused for a second; the store's own error is logged, not answered.
#[utoipa::path(get, path = "/healthz", security(()), responses(
    (status = 200, description = "The store answers", body = HealthBody),
    (status = 503, description = "The store does not answer", body = ErrorBody),
    (status = 400, description = REPEATED_HEADER, body = ErrorBody),
    (status = 421, description = NOT_LOOPBACK, body = ErrorBody),
))]
pub async fn healthz(State(app): State<App>) -> Result<Json<HealthBody>, ApiError> {
    if app.health.answers().await {
        return Ok(Json(HealthBody { status: "ok".into() }));
    }
    Err(ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store-unavailable",
        "the limit store does not answer (its error is in the service's log)",
    ))
}

/// The 400 of a route that takes a body, in the API's document.
const BAD_REQUEST: &str = "Bad JSON, an empty body, or a name that is not UTF-8; an HTTP/1.1 request without Host \
     (`missing-host`); a header the service reads (Host, Authorization, Content-Type, Content-Encoding) given twice \
     (`repeated-header`); a transfer coding other than chunked (`bad-framing`)";

/// The 400 of every other route, in the API's document.
const REPEATED_HEADER: &str = "An HTTP/1.1 request without Host (`missing-host`); a header the service reads (Host, \
     Authorization, Content-Type, Content-Encoding) given twice (`repeated-header`)";

/// The 413 of a route that takes a body, in the API's document.
const TOO_LARGE: &str = "A body over 16 KiB, or a Content-Length that says so (answered before the body is read)";

/// The 415 of a route that takes a body, in the API's document.
const NOT_JSON: &str = "Not JSON, or sent with a Content-Encoding (`unsupported-media-type`)";

/// The 401 of every route but `/healthz`, in the API's document.
const UNAUTHORIZED: &str = "A token is set and the request does not carry it (`unauthorized`)";

/// The 421 of every route, in the API's document.
const NOT_LOOPBACK: &str =
    "No token is set and the request is addressed to a name other than localhost, 127.0.0.1 or [::1] (`not-loopback-host`)";

/// `GET /`: the status page.
pub async fn status(State(app): State<App>) -> Response {
    let headers = [
        (header::CONTENT_SECURITY_POLICY, super::status::policy()),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    (headers, axum::response::Html(super::status::render(&app))).into_response()
}

/// `GET /metrics`: Prometheus text exposition.
pub async fn metrics(State(app): State<App>) -> Response {
    let text = app.metrics.render(limit_store::LimitStore::stats(&**app.limits.store()));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response()
}

/// Any other path.
pub async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not-found",
        "no such route: the API is POST /v1/limits/{name}/attempt, POST /v1/limits/{name}/reset, GET /v1/limits, \
         GET /healthz, GET /metrics, GET / (the status page) and GET /openapi.json (all of it)",
    )
}

/// A known path with the wrong method.
pub async fn wrong_method() -> ApiError {
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed", "attempt and reset are POST; the rest GET")
}

/// The `{name}` of a limit's route: any UTF-8 once percent-decoded; a 400
/// in JSON when it is not.
pub struct LimitName(String);

impl<S: Send + Sync> FromRequestParts<S> for LimitName {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state).await.map(|Path(name)| LimitName(name)).map_err(
            |e: PathRejection| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "invalid-path",
                    format!(
                        "the limit's name in the path can't be read ({}): send it as UTF-8, percent-encoded",
                        e.body_text()
                    ),
                )
            },
        )
    }
}

/// The `(part, value)` pairs of a body, or the 4xx that says what is wrong.
fn parts_of(headers: &HeaderMap, body: Result<Bytes, BytesRejection>) -> Result<Vec<(String, String)>, ApiError> {
    body_of(headers, body, false).map(|(parts, _)| parts)
}

/// The `(part, value)` pairs of a body and its cost (1 unless it takes one
/// and gives it), or the 4xx that says what is wrong.
fn body_of(
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    takes_cost: bool,
) -> Result<(Vec<(String, String)>, u64), ApiError> {
    let body = body.map_err(|e| match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            format!("a body is at most {MAX_BODY} bytes"),
        ),
        status => ApiError::new(
            status,
            "unreadable-body",
            format!(
                "the body can't be read ({}): send it whole, with a Content-Length or as well-formed chunks \
                 (a chunk's extensions and the trailers are small)",
                e.body_text()
            ),
        ),
    })?;
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "send the body as JSON, with Content-Type: application/json",
        ));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::new(StatusCode::BAD_REQUEST, "empty-body", BODY_SHAPE));
    }
    let value: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid-json", format!("the body is not JSON ({e}): {BODY_SHAPE}"))
    })?;
    let invalid =
        |why: String| ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-body", format!("{why}: {BODY_SHAPE}"));
    if let Some(name) = repeated_keys::first_repeated(&body) {
        return Err(invalid(format!("{name:?} is given twice in one object: give each field and each part once")));
    }
    let Value::Object(mut top) = value else { return Err(invalid("the body is not a JSON object".into())) };
    let keys = top.remove("keys").ok_or_else(|| invalid("the body has no \"keys\"".into()))?;
    let cost = if takes_cost { top.remove("cost") } else { None };
    if let Some(other) = top.keys().next() {
        return Err(invalid(format!("unknown field \"{other}\"")));
    }
    let Value::Object(keys) = keys else { return Err(invalid("\"keys\" is not an object".into())) };
    let parts = strings(keys).map_err(invalid)?;
    let cost = cost.map_or(Ok(1), |cost| {
        cost_of(&cost).map_err(|why| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid-cost", format!("{why}: {COST_SHAPE}"))
        })
    })?;
    Ok((parts, cost))
}

/// The cost an attempt's `"cost"` gives, or why it gives none.
fn cost_of(cost: &Value) -> Result<u64, String> {
    let Value::Number(n) = cost else { return Err(format!("\"cost\" is {cost}, not a number")) };
    if let Some(cost) = n.as_u64() {
        return Ok(cost);
    }
    if n.as_i64().is_some() || n.as_f64().is_some_and(|f| f < 0.0) {
        return Err(format!("\"cost\" is {n}, below 0"));
    }
    if n.as_f64().is_some_and(|f| f.fract() == 0.0 && f >= u64::MAX as f64) {
        return Err(format!("\"cost\" is {n}, over the largest cost, {}", u64::MAX));
    }
    Err(format!("\"cost\" is {n}, not an integer"))
}

/// Each part's value, which must be a string.
fn strings(keys: Map<String, Value>) -> Result<Vec<(String, String)>, String> {
    keys.into_iter()
        .map(|(part, value)| match value {
            Value::String(v) => Ok((part, v)),
            other => Err(format!("the value of part \"{part}\" is {other}, not a string")),
        })
        .collect()
}

/// A decision as the API answers it.
fn answer(limit: &str, parts: usize, d: &Decision) -> Response {
    let status = refusal_status(d).unwrap_or(StatusCode::OK);
    let unavailable = status == StatusCode::SERVICE_UNAVAILABLE;
    let body = DecisionBody {
        allowed: d.allowed,
        remaining: d.remaining,
        reset_at: d.reset_at,
        budget: d.budget,
        part: d.part,
        limited_by: d.limited_by,
        retry_after_ms: d.retry_after.map(|r| u64::try_from(r.as_millis()).unwrap_or(u64::MAX)),
        degraded: d.degraded.map(|r| r.to_string()),
        shadow_refused: d.shadow_refused,
        parts: d
            .parts()
            .into_iter()
            .map(|p| PartLeftBody { part: p.part, budget: p.budget, remaining: p.remaining, reset_at: p.reset_at })
            .collect(),
        kind: unavailable.then_some("store-unavailable"),
        error: unavailable.then_some("the limit store is unavailable and this limit's policy is deny"),
    };
    let mut response = (status, Json(body)).into_response();
    fields(limit, parts, d).write_to(response.headers_mut());
    response
}
