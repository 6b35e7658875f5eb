//! Limits built on the store: what an app calls before a sign-in, a password
//! reset, a code sent or checked, or an API call.
//!
//! A [`Limit`] counts attempts per each of its parts (an account, an IP), each
//! part a key in the store with its own [`Algorithm`] and budget. One attempt
//! is one atomic [`update`](crate::LimitStore::update) over all of the limit's
//! keys: allowed only when every part has budget left, and then counted on
//! every part. An attempt may count a cost of more than one at once, or 0
//! to check without counting ([`Limits::attempt_cost`]); each answer says
//! what every part has left ([`Decision::parts`]). Being limited is a
//! [`Decision`], not an error; so is a store that could not answer, which
//! each limit maps by its [`Policy`].
//!
//! ```
//! use std::sync::Arc;
//! use limit_store::{Limits, MemoryStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), limit_store::LimitError> {
//! let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build()?;
//! let d = limits.attempt("sign-in", &[("account", "ada@example.com"), ("ip", "192.0.2.7")]).await?;
//! assert!(d.allowed);
//! // The password was right: clear the account's failures.
//! limits.reset("sign-in", &[("account", "ada@example.com")]).await?;
//! # Ok(()) }
//! ```

mod algorithm;
mod answers;
mod at_once;
mod attempt;
mod backend;
mod builder;
mod compiled_limit;
mod decision;
mod error;
mod fold;
mod gcra;
mod handle;
mod last_hour;
mod legacy;
mod limit;
mod limit_handle;
mod lockout;
mod minutes;
mod name;
mod name_table;
mod normalize;
mod outcome;
mod overrides;
mod parts;
pub mod presets;
mod setting_names;
mod store_key;
mod tally;
mod window;

pub use algorithm::Algorithm;
pub use attempt::Attempt;
pub use builder::LimitsBuilder;
pub use decision::{Decision, LimitCounters, PartLeft};
pub use error::LimitError;
pub use handle::Limits;
pub use last_hour::LastHour;
pub use legacy::RateLimitStore;
pub(crate) use limit::valid_name;
pub use limit::{Limit, Part, Policy};
pub use limit_handle::LimitHandle;
pub use normalize::Normalize;
pub use outcome::Outcome;
pub(crate) use setting_names::ALGORITHM_NAMES;
