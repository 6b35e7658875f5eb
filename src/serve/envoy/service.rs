//! What `ShouldRateLimit` answers: the token, sent once as
//! `authorization: Bearer` metadata, then the request counted against the
//! rules (the gRPC server around it is `server.rs`).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::codegen::http::HeaderMap;
use tonic::Status;

use super::counting::{count, Problem};
use super::metrics::EnvoyMetrics;
use super::EnvoyRules;
use crate::serve::ApiToken;
use limit_store::{LimitStore, StoreError};

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

    /// Whether a call's `headers` carry the token, once (always, when none
    /// is set). A second `authorization` is refused, not chosen from.
    pub(super) fn authorized(&self, headers: &HeaderMap) -> Result<(), Status> {
        let Some(token) = &self.token else { return Ok(()) };
        let mut sent = headers.get_all("authorization").iter();
        let given = match (sent.next(), sent.next()) {
            (Some(one), None) => one.as_bytes().strip_prefix(b"Bearer ").unwrap_or_default(),
            _ => b"",
        };
        if token.matches(given) {
            return Ok(());
        }
        Err(Status::unauthenticated(
            "send the service's token, once, as `authorization: Bearer <token>` metadata (LIMIT_STORE_API_TOKEN)",
        ))
    }

    /// Counts `request` against the rules now.
    pub(super) async fn should_rate_limit(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let rules = self.rules.current();
        match count(&*self.store, &rules, request).await {
            Ok(answer) => {
                for (rule, said) in &answer.answered {
                    self.metrics.answered(rule, *said);
                }
                Ok(answer.response)
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
