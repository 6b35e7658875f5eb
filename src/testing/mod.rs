//! The contract suite: every rule of [`LimitStore`] as a case you can run
//! against your own store, with two handles on it as two instances hold it.
//!
//! Cases use unique random keys, so they run against a real shared server that
//! already holds other data. Each case returns a [`ContractViolation`] naming
//! the rule that broke, what was expected and what was seen.
//!
//! Two ways in: [`contract_tests!`](crate::contract_tests) writes one test per
//! case, and [`contract()`] lists the cases to run by hand.
//!
//! Off by default (feature `testing`) and **not API-stable**: cases are added,
//! and may be renamed, as rules are found, in any release.
//!
//! ```no_run
//! use std::sync::Arc;
//! use limit_store::{testing::StorePair, MemoryStore};
//!
//! async fn pair() -> StorePair {
//!     // Your store, as two instances of the site would each hold it.
//!     let store = MemoryStore::new();
//!     StorePair { first: Arc::new(store.clone()), second: Arc::new(store) }
//! }
//!
//! // One #[tokio::test] per case (needs tokio with "macros" and "rt-multi-thread").
//! limit_store::contract_tests!(pair);
//! ```

mod cases;
mod linearizable;
mod support;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::LimitStore;

/// Two handles on one store, as two instances of a site hold it. For a store
/// that is not shared (memory), both may be the same store.
#[derive(Clone)]
pub struct StorePair {
    /// The first instance's handle.
    pub first: Arc<dyn LimitStore>,
    /// The second instance's handle.
    pub second: Arc<dyn LimitStore>,
}

type CaseFuture = Pin<Box<dyn Future<Output = Result<(), ContractViolation>> + Send>>;

/// One case of the contract suite.
#[derive(Clone, Copy)]
pub struct ContractCase {
    name: &'static str,
    run: fn(StorePair) -> CaseFuture,
}

impl fmt::Debug for ContractCase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ContractCase").field("name", &self.name).finish()
    }
}

impl ContractCase {
    pub(crate) const fn new(name: &'static str, run: fn(StorePair) -> CaseFuture) -> Self {
        ContractCase { name, run }
    }

    /// The case's name, a snake_case sentence saying what it checks.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Runs the case against `pair`.
    pub async fn run(&self, pair: StorePair) -> Result<(), ContractViolation> {
        (self.run)(pair).await.map_err(|mut v| {
            v.case = self.name;
            v
        })
    }
}

/// A broken rule: which case, which rule, what was expected and what was seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContractViolation {
    /// The case that found it.
    pub case: &'static str,
    /// The rule of the contract that broke.
    pub rule: &'static str,
    /// What the rule asks for.
    pub expected: String,
    /// What the store did.
    pub seen: String,
}

impl ContractViolation {
    /// A violation of `rule`.
    pub(crate) fn new(rule: &'static str, expected: impl Into<String>, seen: impl Into<String>) -> Self {
        ContractViolation { case: "", rule, expected: expected.into(), seen: seen.into() }
    }
}

impl fmt::Display for ContractViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "contract case {} broke the rule: {}\n  expected: {}\n  seen:     {}",
            self.case, self.rule, self.expected, self.seen
        )
    }
}

impl std::error::Error for ContractViolation {}

/// Every case of the suite, in a stable order.
pub fn contract() -> Vec<ContractCase> {
    crate::__contract_cases!(__contract_list!())
}

/// Runs the case named `name` against `pair`; panics with the violation, for
/// generated tests.
#[doc(hidden)]
pub async fn run_case(name: &str, pair: StorePair) {
    let case = contract().into_iter().find(|c| c.name() == name).expect("a case of this name");
    if let Err(v) = case.run(pair).await {
        panic!("{v}");
    }
}

#[doc(hidden)]
#[macro_export]
macro_rules! __contract_list {
    (() $($name:ident)*) => {
        vec![$($crate::testing::ContractCase::new(stringify!($name), |pair| Box::pin($crate::testing::cases::$name(pair)))),*]
    };
}

/// Generates one `#[tokio::test]` per contract case, each on a fresh pair from
/// `factory` (an `async fn` answering a `StorePair`, or an `Option<StorePair>`
/// that is `None` when the store's server is not configured: the test then
/// says it was skipped).
///
/// Put it in a module of its own; the tests are named after the cases. They run
/// on tokio's multi-thread runtime, so concurrency cases are really parallel:
/// the calling crate needs tokio with `macros` and `rt-multi-thread`.
#[macro_export]
macro_rules! contract_tests {
    ($factory:expr) => {
        $crate::__contract_cases!(__contract_tests!($factory));
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __contract_tests {
    (($factory:expr) $($name:ident)*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let pair: ::core::option::Option<$crate::testing::StorePair> = ($factory)().await.into();
                match pair {
                    ::core::option::Option::Some(pair) => $crate::testing::run_case(stringify!($name), pair).await,
                    ::core::option::Option::None => eprintln!("skipped {}: the pair factory has no store here", stringify!($name)),
                }
            }
        )*
    };
}
