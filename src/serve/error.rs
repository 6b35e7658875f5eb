//! Every answer that is not a decision: a 4xx (or a 503) with a JSON body
//! `{"error": "...", "kind": "..."}` that says what to fix. Never a 500.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use limit_store::{LimitError, StoreError};

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

    /// Its stable name.
    #[cfg(test)]
    pub(super) fn kind(&self) -> &'static str {
        self.kind
    }

    /// The answer to a request that got `status` before it reached a route
    /// (a head that does not parse, a path that is not UTF-8): its `kind`
    /// and a message by the status alone.
    pub fn for_status(status: StatusCode) -> Self {
        let (kind, error) = match status {
            StatusCode::BAD_REQUEST => (
                "bad-request",
                "the request does not parse as HTTP/1.1, or its path is not UTF-8: send a valid request",
            ),
            StatusCode::URI_TOO_LONG => ("uri-too-long", "the path is too long: limit names are short"),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => (
                "headers-too-large",
                "the request's head (its path and headers) is over 16 KiB, or has too many headers: send a shorter one",
            ),
            StatusCode::PAYLOAD_TOO_LARGE => ("body-too-large", "the body is too large: a body is at most 16 KiB"),
            StatusCode::REQUEST_TIMEOUT => ("request-timeout", "the request did not arrive in time: send it at once"),
            StatusCode::NOT_FOUND => ("not-found", "no such route"),
            StatusCode::METHOD_NOT_ALLOWED => ("method-not-allowed", "attempt and reset are POST; the rest GET"),
            s if s.is_server_error() => ("internal", "the service failed to answer: try again"),
            _ => ("bad-request", "the request can't be answered: see the API at GET /openapi.json"),
        };
        ApiError::new(status, kind, error)
    }

    /// The whole answer as HTTP/1.1 bytes, closing the connection: for an
    /// answer written on the socket, past hyper.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let body =
            serde_json::to_vec(&super::bodies::ErrorBody { error: self.error.clone(), kind: self.kind.to_owned() })
                .unwrap_or_default();
        let mut bytes = format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            self.status.as_str(),
            self.status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes();
        bytes.extend_from_slice(&body);
        bytes
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
            LimitError::CostOverBudget { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "cost-over-budget"),
            LimitError::CostNotCounted { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "cost-not-counted"),
            LimitError::Store(StoreError::Unavailable { .. }) => (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable"),
            LimitError::Store(StoreError::Refused(_)) => (StatusCode::UNPROCESSABLE_ENTITY, "refused"),
            LimitError::Store(_) => (StatusCode::SERVICE_UNAVAILABLE, "store-failed"),
            _ => (StatusCode::UNPROCESSABLE_ENTITY, "invalid"),
        };
        ApiError::new(status, kind, e.to_string())
    }
}
