//! `limit-store serve`: the limits as an HTTP JSON service, for apps in any
//! language (SPEC §9). It reaches the rest of the crate only through its
//! public items: [`Limits`] counts, [`ratelimit_fields`](crate::ratelimit_fields)
//! writes the header fields.
//!
//! - `POST /v1/limits/{name}/attempt` with `{"keys": {"account": "...", "ip": "..."}}`
//! - `POST /v1/limits/{name}/reset` with the same body
//! - `GET /v1/limits`, and `GET /healthz` (whether the store answers; open)
//!
//! With a token, every route but `/healthz` needs `Authorization: Bearer`.

mod auth;
pub mod bodies;
pub mod envoy;
pub mod error;
pub mod metrics;
pub mod openapi;
mod routes;
mod status;

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;

pub use routes::MAX_BODY;

use crate::{Limits, SecretString};

/// The limits the service answers with, which a reload replaces: a request
/// keeps the ones it started with.
#[derive(Clone, Debug)]
pub struct LimitsHandle(Arc<parking_lot::RwLock<Arc<Limits>>>);

impl LimitsHandle {
    /// A handle on `limits`.
    pub fn new(limits: Limits) -> Self {
        LimitsHandle(Arc::new(parking_lot::RwLock::new(Arc::new(limits))))
    }

    /// The limits now.
    pub fn current(&self) -> Arc<Limits> {
        self.0.read().clone()
    }

    /// From now on, `limits` answer (built on the same store, they keep its counts).
    pub fn replace(&self, limits: Limits) {
        *self.0.write() = Arc::new(limits);
    }
}

/// What every route shares.
#[derive(Clone)]
pub struct App {
    limits: LimitsHandle,
    token: Option<SecretString>,
    metrics: Arc<metrics::Metrics>,
    started: Instant,
}

/// The service's routes over `limits`; with `token`, callers must send it.
pub fn router(limits: LimitsHandle, token: Option<SecretString>) -> Router {
    router_with_metrics(limits, token, metrics::Metrics::new())
}

/// [`router`], with `metrics` in `/metrics` (which may hold more: the
/// Envoy service's, registered with [`Metrics::registry_mut`](metrics::Metrics::registry_mut)).
pub fn router_with_metrics(limits: LimitsHandle, token: Option<SecretString>, metrics: metrics::Metrics) -> Router {
    let app = App { limits, token, metrics: Arc::new(metrics), started: Instant::now() };
    Router::new()
        .route("/v1/limits/{name}/attempt", post(routes::attempt))
        .route("/v1/limits/{name}/reset", post(routes::reset))
        .route("/v1/limits", get(routes::list))
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(routes::metrics))
        .route("/", get(routes::status))
        .route("/openapi.json", get(openapi::document))
        .fallback(routes::not_found)
        .method_not_allowed_fallback(routes::wrong_method)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(app.clone(), auth::require_token))
        .layer(middleware::from_fn_with_state(app.clone(), log_request))
        .with_state(app)
}

/// Serves `router` on `listener` until `shutdown` resolves, then finishes the
/// requests in flight.
pub async fn run(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router).with_graceful_shutdown(shutdown).await
}

/// One structured line per request, at debug level, and its count by route
/// and status; never a key's value.
async fn log_request(State(app): State<App>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let route = request.extensions().get::<MatchedPath>().map_or("unmatched", |m| m.as_str()).to_owned();
    let response = next.run(request).await;
    app.metrics.answered(&route, response.status().as_u16());
    tracing::debug!(
        kind = "limit-store-request",
        %method,
        path,
        status = response.status().as_u16(),
        micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "request"
    );
    response
}
