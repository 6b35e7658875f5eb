//! Who may call: with a token set, every route but `/healthz` needs
//! `Authorization: Bearer <token>`, checked by [`ApiToken::matches`](super::ApiToken::matches).

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::App;

/// Lets a request through when no token is set, or when it carries it.
pub async fn require_token(State(app): State<App>, request: Request, next: Next) -> Response {
    let Some(token) = &app.token else { return next.run(request).await };
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .unwrap_or_default();
    if token.matches(given) {
        return next.run(request).await;
    }
    let mut answer = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "send the service's token as `Authorization: Bearer <token>` (LIMIT_STORE_API_TOKEN)",
    )
    .into_response();
    answer.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    answer
}
