//! Limits in an axum app (feature `axum`): a tower [`LimitLayer`] that puts
//! one limit in front of a router or any tower service, and [`attempt`] for
//! handlers that limit what only they can see (the account of a sign-in).
//!
//! - Keys: [`PeerIp`] (the connection's address), [`ClientIp`] (a forwarded
//!   header believed only from trusted proxies, read from the right),
//!   [`HeaderKey`] (an API key), or any closure over the request's head
//!   ([`KeyExtractor`]). IPv6 clients count per network, on any part: the
//!   limits' [`ipv6_prefix`](crate::limits::LimitsBuilder::ipv6_prefix),
//!   /64 by default.
//! - Answers: 429 with `Retry-After` when limited, 503 when the store is
//!   unavailable and the limit's [`Policy`](crate::Policy) denies (passing
//!   through when it allows), a 4xx or a pass for a request without a key
//!   ([`MissingKey`]); a small JSON body by default ([`RefusalBody`]).
//! - Every decided answer carries the `RateLimit-Policy` and `RateLimit`
//!   fields, written by [`ratelimit_fields`](crate::ratelimit_fields) as
//!   `serve` writes them; refusals only, with
//!   [`LimitLayer::fields_on_admitted`]`(false)`.
//!
//! ```
//! use std::sync::Arc;
//! use axum::{routing::get, Router};
//! use limit_store::layer::{ClientIp, HeaderKey, LimitLayer};
//! use limit_store::limits::{Algorithm, Normalize, Part};
//! use limit_store::{Limit, Limits, MemoryStore};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limits = Limits::builder()
//!     .store(Arc::new(MemoryStore::new()))
//!     .single_instance(true)
//!     .limit(Limit::new("per-ip").part(Part::new("ip", Algorithm::gcra(100, Duration::from_secs(1))).normalized(Normalize::Ip)))
//!     .build()?;
//! let behind_proxy = ClientIp::trusting(["10.0.0.0/8"])?;
//! let app: Router = Router::new()
//!     .route("/api/items", get(|| async { "items" }))
//!     .layer(LimitLayer::new(limits.clone(), "api", "client", HeaderKey::new("x-api-key"))?)
//!     .layer(LimitLayer::new(limits, "per-ip", "ip", behind_proxy)?);
//! # let _ = app; Ok(()) }
//! ```

mod config;
mod extract;
mod fields;
mod handler;
mod key;
#[allow(clippy::module_inception)] // the layer of the `layer` module
mod layer;
mod proxies;
mod refusal;
mod service;

pub use extract::{HeaderKey, KeyExtractor, NeedsParts, PeerIp};
pub use handler::{attempt, Admitted};
pub use key::Key;
pub use layer::LimitLayer;
pub use proxies::{BadCidr, ClientIp, ForwardedHeader};
pub use refusal::{MissingKey, Refusal, RefusalBody};
pub use service::{LimitFuture, LimitService};
