//! Every answer that is not a decision: a 4xx (or a 503) with a JSON body
//! `{"error": "...", "kind": "..."}` that says what to fix. Never a 500.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::LimitError;

/// An error answer of the service.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    kind: &'static str,
    error: String,
}

impl ApiError {
    /// An answer with `status`, a stable `kind` and a message for people.
    pub fn new(status: StatusCode, kind: &'static str, error: impl Into<String>) -> Self {
        ApiError { status, kind, error: error.into() }
    }

    /// The status of the answer.
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(super::bodies::ErrorBody { error: self.error, kind: self.kind.to_owned() })).into_response()
    }
}

impl From<LimitError> for ApiError {
    fn from(e: LimitError) -> Self {
        let (status, kind) = match &e {
            LimitError::UnknownLimit { .. } => (StatusCode::NOT_FOUND, "unknown-limit"),
            LimitError::UnknownPart { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "unknown-part"),
            LimitError::MissingPart { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "missing-part"),
            LimitError::DuplicatePart { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "duplicate-part"),
            LimitError::BadValue { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "bad-value"),
            LimitError::Store(s) if s.is_unavailable() => (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable"),
            LimitError::Store(s) if s.is_refused() => (StatusCode::UNPROCESSABLE_ENTITY, "refused"),
            LimitError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store-failed"),
            _ => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}
