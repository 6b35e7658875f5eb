//! What a limit call can't do: [`LimitError`]. Being limited is not an error.

use crate::StoreError;

/// The error of a limit call. Limited is not an error (see [`Decision`](super::decision::Decision)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LimitError {
    /// No limit has that name.
    #[error("no limit named `{name}`: the limits are {}", .known.join(", "))]
    UnknownLimit {
        /// The name asked for.
        name: String,
        /// The limits there are.
        known: Vec<String>,
    },
    /// A part was given that the limit does not count per.
    #[error("limit `{limit}` has no part `{part}`: it takes {}", .takes.join(", "))]
    UnknownPart {
        /// The limit.
        limit: String,
        /// The part given.
        part: String,
        /// The parts the limit takes.
        takes: Vec<String>,
    },
    /// A part the limit counts per was not given.
    #[error("limit `{limit}` needs a value for part `{part}`: it takes {}", .takes.join(", "))]
    MissingPart {
        /// The limit.
        limit: String,
        /// The missing part.
        part: String,
        /// The parts the limit takes.
        takes: Vec<String>,
    },
    /// A value is not what its part takes (an `ip` part that is not an IP address).
    #[error("part `{part}` of limit `{limit}` takes {expected}: pass the client's address as text, e.g. 192.0.2.7 or 2001:db8::7")]
    BadValue {
        /// The limit.
        limit: String,
        /// The part.
        part: String,
        /// What it takes.
        expected: &'static str,
    },
    /// The same part was given twice.
    #[error("part `{part}` was given twice to limit `{limit}`: give each part once")]
    DuplicatePart {
        /// The limit.
        limit: String,
        /// The repeated part.
        part: String,
    },
    /// An attempt's cost is over a part's budget: no wait would let it
    /// through, so it is refused, counting nothing on any part.
    #[error("a cost of {cost} is over the budget of part `{part}` of limit `{limit}` ({budget}): it can never be allowed; count at most {budget} at once, or raise the budget")]
    CostOverBudget {
        /// The limit.
        limit: String,
        /// The part whose budget the cost is over.
        part: String,
        /// The cost asked for.
        cost: u64,
        /// The part's budget.
        budget: u64,
    },
    /// A cost other than 1 on a limit counted in an earlier-contract
    /// [`RateLimitStore`](super::RateLimitStore), which adds one at a time
    /// and can't check without counting.
    #[error("limit `{limit}` counts in an earlier-contract RateLimitStore, which counts one at a time: attempt it with a cost of 1, or count it in a LimitStore to use a cost of {cost}")]
    CostNotCounted {
        /// The limit.
        limit: String,
        /// The cost asked for.
        cost: u64,
    },
    /// A limit's definition can't count (found when the limits are built).
    #[error("limit `{limit}` can't be used: {detail}")]
    Invalid {
        /// The limit.
        limit: String,
        /// What is wrong and what to change.
        detail: String,
    },
    /// The store refused the call, or held corrupt data, or (for `reset`) was
    /// unavailable. `attempt` maps an unavailable store by the limit's policy.
    #[error(transparent)]
    Store(#[from] StoreError),
}
