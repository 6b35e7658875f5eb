//! # limit-store
//!
//! The store behind rate limits: where the counts of sign-ins, password resets,
//! codes sent, code guesses and API calls are kept, exactly, under concurrency.
//!
//! - [`LimitStore`] is the contract: one atomic read-modify-write over 1 to 32
//!   keys on the store's own clock, plus `read` and `sweep`.
//! - [`MemoryStore`] keeps counts in this process (the default): sharded, bounded.
//! - [`RedisStore`] (feature `redis`) keeps counts in Redis or Valkey, exact
//!   across instances, on Redis's clock.
//! - [`Guarded`] puts a deadline (2 s) and an in-flight cap (64) on any store.
//! - [`Limits`] is what an app calls: presets for sign-in, password reset,
//!   codes sent and checked, and API calls, counted on any store; settings in
//!   code or in `limit-store.toml` ([`config`]).
//! - [`testing`] (feature `testing`) is the contract suite: run it against your
//!   own store with two handles, as two instances of your site would hold it.
//! - [`ratelimit_fields`] writes the `RateLimit-Policy`/`RateLimit` header
//!   fields of a [`Decision`] for any HTTP layer (the layer's, and those of
//!   `limit-store serve`, the program's HTTP service, built on this crate's
//!   public items alone).
//! - `layer` (feature `axum`) puts a limit in front of an axum router or any
//!   tower service, and turns a decision into an answer inside a handler.
//!
//! The [`guide`] has a page per topic: limits, settings, the service, the
//! layer, Envoy, stores, the bound, the database and Redis stores,
//! security, and logs (every `kind` is a [`log::Kind`]).
//!
//! ## What to use for what
//!
//! | you want to | use |
//! | --- | --- |
//! | limit sign-ins, password resets, codes sent or guessed, API calls | [`Limits`] and its presets: `limits.attempt("sign-in", &[("account", a), ("ip", ip)])` |
//! | limit whole routes of an axum (or tower) app | `layer::LimitLayer` with a key: peer IP, a trusted proxy's header, an API key, a closure |
//! | limit inside a handler (the account is in the form) | `layer::attempt`, whose refusal is an axum response |
//! | a limit of your own | [`Limit`] with [`limits::Part`]s and an [`limits::Algorithm`], given to [`LimitsBuilder::limit`](limits::LimitsBuilder::limit) |
//! | settings in a file | [`config::Config::load`]`("limit-store.toml")?.build_limits()` |
//! | limits for an app in another language | `limit-store serve`, the HTTP JSON service |
//! | your own counting on the store | [`update_with`] on any [`LimitStore`] |
//! | your own store (DynamoDB, etcd, ...) | implement [`LimitStore`], check it with [`testing`] |
//!
//! ## Features
//!
//! | feature | adds |
//! | --- | --- |
//! | `sqlite`, `postgres`, `mysql` | `DatabaseStore` on that database |
//! | `redis` | `RedisStore` on Redis or Valkey |
//! | `axum` | `layer`: the tower layer and the handler helper |
//! | `testing` | [`testing`]: the contract suite and `contract_tests!`; not API-stable |
//! | `cli` | the program `limit-store` and its HTTP service (every store, clap, the HTTP stack); nothing in the library |
//!
//! No feature is on by default: the crate is then the contract, the memory
//! store, the guard and [`Limits`].
//!
//! ## From one process to many instances
//!
//! 1. One process: the memory store (the default). Say so with
//!    [`LimitsBuilder::single_instance`](limits::LimitsBuilder::single_instance),
//!    or startup warns (`kind = "limit-store-not-shared"`): on several
//!    instances each would count alone, and every budget would multiply.
//! 2. Several instances: give [`Limits`] a shared store (the database the app
//!    already has, through `DatabaseStore`, or another shared store). Nothing
//!    else changes: the same limits, layers and handlers count one budget
//!    across every instance, on the store's clock.
//! 3. Decide per limit what an unavailable store means ([`Policy`]): `deny`
//!    for sign-in and codes, `allow` for the API, so an outage of the store
//!    is not an outage of the site. [`Guarded`] answers every call within its
//!    deadline either way.
//!
//! The crate is `#![forbid(unsafe_code)]`: a caller may drop or leak (`mem::forget`) a
//! call's future, and nothing then reaches what its `apply` borrows.
//!
//! ```
//! use std::sync::Arc;
//! use limit_store::{update_with, Entry, Guarded, LimitStore, MemoryStore, Write};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), limit_store::StoreError> {
//! let store: Arc<dyn LimitStore> = Arc::new(Guarded::new(Arc::new(MemoryStore::new())));
//! // Count one sign-in attempt for an account, in a 15-minute window.
//! let count = update_with(&*store, &["sign-in:account:ada@example.com"], |current, now| {
//!     let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
//!     let expires_at = current[0].as_ref().map_or(now + 15 * 60_000, |e| e.expires_at);
//!     (vec![Write::Put(Entry { value: n.into(), expires_at })], n)
//! })
//! .await?;
//! assert_eq!(count, 1);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod ask;
mod bound;
mod call_sizes;
pub mod clock;
pub mod config;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
// Rendered in the docs; its examples run as doctests with every store's feature.
#[cfg(any(
    all(doc, not(doctest)),
    all(doctest, feature = "axum", feature = "sqlite", feature = "postgres", feature = "redis", feature = "testing")
))]
pub mod guide;
// The HMAC of keys under the site secret: how the shared stores name a row.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
mod key_hash;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
mod last_seen;
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub mod layer;
pub mod limits;
pub mod log;
pub mod ratelimit_fields;
pub mod rules;
pub mod secret;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
mod server_clock;
pub mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
mod transaction;

pub use error::StoreError;
pub use guard::Guarded;
pub use limits::{Decision, Limit, LimitError, Limits, PartLeft, Policy};
pub use rules::{MAX_KEYS, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use secret::{SecretString, SecretUrl};
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
#[cfg_attr(docsrs, doc(cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))))]
pub use store::database::{DatabaseInfo, DatabaseStore, DatabaseStoreBuilder};
pub use store::memory::MemoryStore;
#[cfg(feature = "redis")]
pub use store::redis::{RedisInfo, RedisStore, RedisStoreBuilder};
pub use store::{
    update_with, Apply, AsyncIntegerCounter, Entry, GcraCounted, GcraStep, IntegerCounter, IntegerCounts, LimitStore,
    Millis, OwnedApply, StoreStats, Write,
};
pub use transaction::in_transaction;

/// The README's Rust snippets, compiled and run as doctests.
#[cfg(all(
    doctest,
    feature = "axum",
    feature = "sqlite",
    feature = "postgres",
    feature = "redis",
    feature = "testing"
))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
