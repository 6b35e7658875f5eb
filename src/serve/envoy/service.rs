//! The gRPC service: `envoy.service.ratelimit.v3.RateLimitService`, on
//! tonic, with the token as `authorization: Bearer` metadata.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tonic::metadata::MetadataMap;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

use super::counting::{count, Problem};
use super::metrics::EnvoyMetrics;
use super::EnvoyRules;
use crate::serve::ApiToken;
use limit_store::{LimitStore, StoreError};

/// The largest request taken, in bytes: far above any descriptor list envoy sends.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;

/// Envoy's rate limit service over the rules of an [`EnvoyRules`], counting
/// in a store (give it the guarded store the HTTP limits count in).
#[derive(Clone)]
pub(crate) struct EnvoyService {
    rules: EnvoyRules,
    store: Arc<dyn LimitStore>,
    token: Option<ApiToken>,
    metrics: EnvoyMetrics,
}

impl std::fmt::Debug for EnvoyService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvoyService").field("token", &self.token.is_some()).finish_non_exhaustive()
    }
}

impl EnvoyService {
    /// The service over `rules`, counting in `store`; with `token`, callers
    /// must send it as `authorization: Bearer <token>` metadata.
    pub(crate) fn new(rules: EnvoyRules, store: Arc<dyn LimitStore>, token: Option<ApiToken>) -> Self {
        EnvoyService { rules, store, token, metrics: EnvoyMetrics::default() }
    }

    /// Registers its counters in serve's `/metrics`.
    pub(crate) fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        self.metrics.register(registry);
    }

    /// Whether `metadata` carries the token (always, when none is set).
    fn authorized(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(token) = &self.token else { return Ok(()) };
        let given = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        if token.matches(given.as_bytes()) {
            return Ok(());
        }
        Err(Status::unauthenticated(
            "send the service's token as `authorization: Bearer <token>` metadata (LIMIT_STORE_API_TOKEN)",
        ))
    }
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.authorized(request.metadata())?;
        let rules = self.rules.current();
        match count(&*self.store, &rules, request.get_ref()).await {
            Ok(answer) => {
                for (rule, said) in &answer.answered {
                    self.metrics.answered(rule, *said);
                }
                Ok(Response::new(answer.response))
            }
            Err(Problem::Invalid(why)) => Err(Status::invalid_argument(why)),
            Err(Problem::Store(e)) => {
                // The guard logs the store's failure; envoy's failure_mode_deny decides.
                self.metrics.unavailable();
                Err(Status::unavailable(match e {
                    StoreError::Unavailable { reason, .. } => format!("the limit store is unavailable ({reason})"),
                    _ => "the limit store is unavailable".to_owned(),
                }))
            }
        }
    }
}

/// Serves `service` on `listener` until `shutdown` resolves, then finishes
/// the calls in flight. Requests over 64 KiB are refused, calls
/// time out after 10 s, and a connection carries at most 1024 streams at once.
pub(crate) async fn run_envoy(
    listener: TcpListener,
    service: EnvoyService,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let server = RateLimitServiceServer::new(service).max_decoding_message_size(MAX_REQUEST);
    tonic::transport::Server::builder()
        .timeout(Duration::from_secs(10))
        .max_concurrent_streams(1024)
        .http2_max_pending_accept_reset_streams(Some(64))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(server)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), shutdown)
        .await
}
