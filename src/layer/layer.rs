//! `LimitLayer`: one limit of a [`Limits`], keyed by a [`KeyExtractor`],
//! in front of a tower service.

use std::sync::Arc;

use axum::http::StatusCode;
use tower_layer::Layer;

use super::config::LayerConfig;
use super::extract::KeyExtractor;
use super::fields::AdmittedFields;
use super::refusal::{MissingKey, RefusalBody};
use super::service::LimitService;
use crate::{LimitError, Limits};

/// Counts every request on one limit, keyed by what `K` extracts; answers
/// 429 (limited), 503 (store unavailable and the limit denies) or a 4xx
/// (no key) in the service's place, and adds the RateLimit fields to every
/// answer it decides (to refusals only, with
/// [`fields_on_admitted(false)`](Self::fields_on_admitted)). Layers stack:
/// each counts on its own limit.
///
/// ```
/// use std::sync::Arc;
/// use axum::{routing::get, Router};
/// use limit_store::layer::{HeaderKey, LimitLayer, MissingKey};
/// use limit_store::{Limits, MemoryStore};
///
/// # fn main() -> Result<(), limit_store::LimitError> {
/// let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build()?;
/// // The `api` preset, per API key: 600 a minute.
/// let api = LimitLayer::new(limits, "api", "client", HeaderKey::new("x-api-key"))?
///     .on_missing_key(MissingKey::Reject(axum::http::StatusCode::UNAUTHORIZED));
/// let app: Router = Router::new().route("/api/items", get(|| async { "items" })).layer(api);
/// # let _ = app; Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct LimitLayer<K> {
    config: LayerConfig<K>,
}

impl<K: KeyExtractor> LimitLayer<K> {
    /// Counts on limit `limit` of `limits`, which must count exactly one
    /// part, `part`, with the value `extractor` finds. Refuses a limit or
    /// part that does not exist, or a limit that counts other parts too.
    pub fn new(limits: Limits, limit: &str, part: &str, extractor: K) -> Result<Self, LimitError> {
        let Some(defined) = limits.limit(limit) else {
            return Err(LimitError::UnknownLimit { name: limit.to_owned(), known: limits.names() });
        };
        let takes = || defined.parts().iter().map(|p| p.name().to_owned()).collect::<Vec<_>>();
        if defined.part_named(part).is_none() {
            return Err(LimitError::UnknownPart { limit: limit.to_owned(), part: part.to_owned(), takes: takes() });
        }
        if let Some(other) = defined.parts().iter().find(|p| p.name() != part) {
            return Err(LimitError::MissingPart {
                limit: limit.to_owned(),
                part: other.name().to_owned(),
                takes: takes(),
            });
        }
        let Some(handle) = limits.handle(limit) else {
            return Err(LimitError::UnknownLimit { name: limit.to_owned(), known: limits.names() });
        };
        Ok(LimitLayer {
            config: LayerConfig {
                limit: limit.to_owned(),
                part: part.to_owned(),
                what: format!("`{part}`"),
                handle,
                extractor,
                missing: MissingKey::default(),
                body: RefusalBody::default(),
                fields: Some(AdmittedFields::new(limit)),
            },
        })
    }

    /// What a request without a key gets: 400 by default.
    pub fn on_missing_key(mut self, missing: MissingKey) -> Self {
        self.config.missing = match missing {
            MissingKey::Reject(status) if !status.is_client_error() => MissingKey::Reject(StatusCode::BAD_REQUEST),
            other => other,
        };
        self
    }

    /// The body of refusals: JSON by default.
    pub fn body(mut self, body: RefusalBody) -> Self {
        self.config.body = body;
        self
    }

    /// Whether admitted answers carry the RateLimit fields: yes by default.
    /// With `false`, only refusals do (with `Retry-After`), as
    /// `tower_governor` sends its headers only when asked: for an app that
    /// writes its own, or wants no extra bytes on every answer.
    pub fn fields_on_admitted(mut self, send: bool) -> Self {
        self.config.fields = send.then(|| AdmittedFields::new(&self.config.limit));
        self
    }

    /// Names the key in the missing-key message (`"an X-Api-Key header"`).
    pub fn key_name(mut self, what: &str) -> Self {
        what.clone_into(&mut self.config.what);
        self
    }
}

impl<S, K: Clone> Layer<S> for LimitLayer<K> {
    type Service = LimitService<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        LimitService::new(inner, Arc::new(self.config.clone()))
    }
}
