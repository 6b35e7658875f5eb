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
//! - `serve` (feature `serve`) is the HTTP service behind `limit-store serve`,
//!   and [`ratelimit_fields`] writes the `RateLimit-Policy`/`RateLimit`
//!   header fields of a [`Decision`] for any HTTP layer.
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

mod bound;
pub mod clock;
pub mod config;
pub mod error;
pub mod guard;
pub mod keys;
pub mod limits;
pub mod log;
pub mod ratelimit_fields;
pub mod rules;
pub mod secret;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod seen;
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(any(feature = "postgres", feature = "redis"))]
mod server_clock;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transaction;

pub use error::StoreError;
pub use guard::Guarded;
pub use limits::{Decision, Limit, LimitError, Limits, Policy};
pub use rules::{MAX_KEYS, MAX_KEY_BYTES, MAX_VALUE_BYTES};
pub use secret::{SecretString, SecretUrl};
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub use store::database::{CountPaths, DatabaseStore, DatabaseStoreBuilder};
pub use store::memory::MemoryStore;
#[cfg(feature = "redis")]
pub use store::redis::{RedisStore, RedisStoreBuilder, RoundTrips};
pub use store::{update_with, Apply, Entry, LimitStore, Millis, OwnedApply, StoreStats, Write};
pub use transaction::in_transaction;
