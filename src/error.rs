//! `StoreError`: the one error of every store call, in three families.
//!
//! - **unavailable**: the store could not answer in time or at all (timed out,
//!   overloaded, full, down). Each limit maps it by its own policy.
//! - **refused input**: the call itself was wrong (bad keys, oversized value, a bad
//!   `apply` answer). Nothing was written; fix the caller.
//! - **corrupt data**: a stored entry does not parse. That key fails; others work.
//!
//! A fourth, **setup**, is only met when a store starts: it can't run as
//! configured (a bad URL, a missing table, a short secret).

use std::fmt;

/// A boxed error kept as the source of a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a store call was answered unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unavailable {
    /// The call did not finish within the guard's deadline.
    Timeout,
    /// Too many calls were already running in the store.
    Overloaded,
    /// The store holds its bound of live entries and the update needed a new one.
    Full,
    /// The store failed or could not be reached.
    StoreFailed,
}

impl Unavailable {
    /// A short stable name, used in logs and metrics (as it prints).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Unavailable::Timeout => "timeout",
            Unavailable::Overloaded => "overloaded",
            Unavailable::Full => "full",
            Unavailable::StoreFailed => "store-failed",
        }
    }

    /// What an operator can do about it.
    fn advice(self) -> &'static str {
        match self {
            Unavailable::Timeout => {
                "the store is slow or locked; check its health and load (the deadline is a Guarded setting)"
            }
            Unavailable::Overloaded => {
                "too many store calls are still running; check the store's latency or raise the in-flight cap"
            }
            Unavailable::Full => {
                "raise max_entries, shorten windows, or look for a flood of new keys (held keys keep counting)"
            }
            Unavailable::StoreFailed => "check that the store is reachable and healthy",
        }
    }
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A call the store refused because of its input. Nothing was written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RefusedInput {
    /// The call named no keys.
    #[error("no keys given: pass 1 to {max} keys per call", max = crate::call_sizes::MAX_KEYS)]
    NoKeys,
    /// The call named more keys than a store takes at once.
    #[error("{count} keys given: pass at most {max} keys per call (split the limit's parts)", max = crate::call_sizes::MAX_KEYS)]
    TooManyKeys {
        /// How many keys were given.
        count: usize,
    },
    /// The same key appeared twice in one call.
    #[error("key #{index} repeats key #{first}: pass each key once per call")]
    DuplicateKey {
        /// Position of the repeat.
        index: usize,
        /// Position of its first appearance.
        first: usize,
    },
    /// A key was the empty string.
    #[error("key #{index} is empty: keys are 1 to {max} bytes", max = crate::call_sizes::MAX_KEY_BYTES)]
    EmptyKey {
        /// Position of the key.
        index: usize,
    },
    /// A key was longer than the store takes.
    #[error("key #{index} is {len} bytes: keys are at most {max} bytes (hash long keys first)", max = crate::call_sizes::MAX_KEY_BYTES)]
    KeyTooLong {
        /// Position of the key.
        index: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// A value to write was larger than the store takes.
    #[error("the value for key #{index} is {size} bytes serialized: values are at most {max} bytes (keep counters compact)", max = crate::call_sizes::MAX_VALUE_BYTES)]
    ValueTooLarge {
        /// Position of the key.
        index: usize,
        /// Its serialized size in bytes.
        size: usize,
    },
    /// `apply` answered a different number of writes than keys.
    #[error("apply returned {writes} writes for {keys} keys: return exactly one Write per key, in key order")]
    WrongWriteCount {
        /// How many keys the call had.
        keys: usize,
        /// How many writes `apply` returned.
        writes: usize,
    },
    /// `apply` panicked; the store wrote nothing and keeps working.
    #[error("apply panicked ({message}): nothing was written; apply must not panic")]
    ApplyPanicked {
        /// The panic's message, where it had one.
        message: String,
    },
    /// The call was made inside a transaction of the app's own.
    #[error("a limit store call was made inside the app's own transaction: count before or after the transaction, never inside it")]
    InTransaction,
}

/// The error of every store call.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not answer: each limit applies its unavailable policy.
    #[error("limit store unavailable ({reason}): {detail}; {advice}", advice = reason.advice())]
    Unavailable {
        /// Why.
        reason: Unavailable,
        /// What happened, for the log.
        detail: String,
        /// The underlying error, where there was one.
        #[source]
        source: Option<BoxError>,
    },
    /// The call's input was refused; nothing was written.
    #[error("limit store refused the call: {0}")]
    Refused(#[from] RefusedInput),
    /// The store can't start as configured (a bad URL, a missing table, a
    /// short secret). The message says what to change.
    #[error("limit store can't start: {detail}")]
    Setup {
        /// What is wrong and what to do.
        detail: String,
        /// The underlying error, where there was one.
        #[source]
        source: Option<BoxError>,
    },
    /// A stored entry does not parse. This key fails; other keys keep working.
    #[error("corrupt entry under key hash {key_hash}: {detail}; delete that row or let it expire")]
    Corrupt {
        /// The stored (hashed) key of the entry, never the key itself.
        key_hash: String,
        /// What does not parse.
        detail: String,
        /// The parse error, where there was one.
        #[source]
        source: Option<BoxError>,
    },
}

impl StoreError {
    /// An unavailable answer with no underlying error.
    pub fn unavailable(reason: Unavailable, detail: impl Into<String>) -> Self {
        StoreError::Unavailable { reason, detail: detail.into(), source: None }
    }

    /// A setup error saying what to change.
    pub(crate) fn setup(detail: impl Into<String>) -> Self {
        StoreError::Setup { detail: detail.into(), source: None }
    }

    /// The store failed with `source`: answered unavailable, source kept.
    pub(crate) fn store_failed(detail: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Unavailable { reason: Unavailable::StoreFailed, detail: detail.into(), source: Some(source.into()) }
    }

    /// True for the unavailable family.
    pub(crate) fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable { .. })
    }

    /// Why the store was unavailable, for the unavailable family.
    pub(crate) fn unavailable_reason(&self) -> Option<Unavailable> {
        match self {
            StoreError::Unavailable { reason, .. } => Some(*reason),
            _ => None,
        }
    }

    /// The refusal, for the refused-input family.
    #[cfg(test)]
    pub(crate) fn refusal(&self) -> Option<&RefusedInput> {
        match self {
            StoreError::Refused(r) => Some(r),
            _ => None,
        }
    }

    /// True for the refused-input family.
    #[cfg(feature = "testing")]
    pub(crate) fn is_refused(&self) -> bool {
        matches!(self, StoreError::Refused(_))
    }

    /// True for a store that can't start as configured.
    #[cfg(all(test, any(feature = "sqlite", feature = "postgres", feature = "mysql")))]
    pub(crate) fn is_setup(&self) -> bool {
        matches!(self, StoreError::Setup { .. })
    }

    /// True for the corrupt-data family.
    #[cfg(all(test, feature = "redis"))]
    pub(crate) fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }
}
