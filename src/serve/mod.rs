//! `limit-store serve`: the limits as an HTTP JSON service, for apps in any
//! language (SPEC §9). [`Limits`] counts, [`ratelimit_fields`](limit_store::ratelimit_fields)
//! writes the header fields, and the settings ([`Config`](limit_store::config::Config))
//! open the store behind one guard.
//!
//! - `POST /v1/limits/{name}/attempt` with `{"keys": {"account": "...", "ip": "..."}}`
//! - `POST /v1/limits/{name}/reset` with the same body
//! - `GET /v1/limits`, and `GET /healthz` (whether the store answers; open)
//!
//! With an [`ApiToken`], every route but `/healthz` needs
//! `Authorization: Bearer`. Every 4xx is the JSON error `{"error", "kind"}`.
//!
//! [`run`] is `limit-store serve` whole: it serves these routes from the
//! settings, with deadlines on slow clients, a cap on connections, reloads,
//! Envoy's gRPC service beside them, and a bounded drain at shutdown.
//! [`router`] is the routes alone, which the request bodies' properties drive
//! (the service is the program's: an app embeds the library's layer instead).

mod auth;
mod bodies;
mod connection;
mod envoy;
mod error;
mod front_door;
mod health;
mod listener;
mod metrics;
mod openapi;
mod program;
mod repeated_keys;
mod request_head;
mod routes;
mod socket;
mod status;
mod token;

// The proptest twin of the `serve_body` fuzz target, with the router it drives.
#[cfg(test)]
#[path = "../../tests/properties/fuzz_serve_body.rs"]
mod fuzz_serve_body;

use std::sync::Arc;
use std::time::Instant;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use envoy::EnvoyService;
pub use program::run;
pub use token::ApiToken;

use limit_store::limits::LimitsBuilder;
use limit_store::{Guarded, LimitError, Limits};
use routes::MAX_BODY;

/// The store the service counts in, behind one guard for as long as the
/// service runs, and the limits on it, which a reload replaces: a request
/// keeps the limits it started with.
#[derive(Clone, Debug)]
pub(crate) struct LimitsHandle(Arc<Held>);

#[derive(Debug)]
struct Held {
    store: Arc<Guarded>,
    current: parking_lot::RwLock<Arc<Limits>>,
}

impl LimitsHandle {
    /// The limits `limits` builds on `store` (the store set on `limits`, if
    /// any, is replaced by `store`).
    pub(crate) fn new(store: Arc<Guarded>, limits: LimitsBuilder) -> Result<Self, LimitError> {
        let built = limits.store(store.clone()).build()?;
        Ok(LimitsHandle(Arc::new(Held { store, current: parking_lot::RwLock::new(Arc::new(built)) })))
    }

    /// The limits now.
    pub(crate) fn current(&self) -> Arc<Limits> {
        self.0.current.read().clone()
    }

    /// From now on, the limits `limits` builds answer: on the same store
    /// behind the same guard (its counts, its in-flight calls and its cap
    /// are kept), each limit carrying on the counters of the one of its name.
    pub(crate) fn reload(&self, limits: LimitsBuilder) -> Result<(), LimitError> {
        let built = limits.store(self.0.store.clone()).counters_from(&self.current()).build()?;
        *self.0.current.write() = Arc::new(built);
        Ok(())
    }

    /// The store, behind its guard.
    pub(crate) fn store(&self) -> &Arc<Guarded> {
        &self.0.store
    }
}

/// What every route shares.
#[derive(Clone)]
pub(crate) struct App {
    limits: LimitsHandle,
    token: Option<ApiToken>,
    metrics: Arc<metrics::Metrics>,
    health: Arc<health::Health>,
    started: Instant,
}

/// The service's routes over the limits `limits` builds on `store` (the
/// store set on `limits`, if any, is replaced by `store`, whose guard
/// `/healthz` reads beneath); with `token`, callers must send it. The
/// program serves [`router_on`]; this is the router alone, for the request
/// bodies' properties (`tests/properties/serve_body.rs`: their proptest
/// twin below, and the fuzz target, which compiles this module in).
#[allow(dead_code)]
pub fn router(store: Arc<Guarded>, limits: LimitsBuilder, token: Option<ApiToken>) -> Result<Router, LimitError> {
    Ok(router_on(LimitsHandle::new(store, limits)?, token, None))
}

/// The routes over `limits`. With `envoy`, `/metrics` also holds the Envoy
/// service's counters.
pub(crate) fn router_on(limits: LimitsHandle, token: Option<ApiToken>, envoy: Option<&EnvoyService>) -> Router {
    let mut metrics = metrics::Metrics::new();
    if let Some(envoy) = envoy {
        envoy.register_metrics(metrics.registry_mut());
    }
    let health = health::Health::new(limits.store());
    let app = App { limits, token, metrics: Arc::new(metrics), health, started: Instant::now() };
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
        .layer(front_door::FrontDoorLayer::new(app.clone()))
        .with_state(app)
}
