//! What an attempt answers: a [`Decision`] (with what each part has left,
//! [`PartLeft`]), and the counts of each answer a limit gave ([`LimitCounters`]).

use std::time::Duration;

use crate::error::Unavailable;
use crate::Millis;

/// The answer to one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Go ahead. False when the attempt is limited, or when the store was
    /// unavailable and the limit's policy is deny (see [`Decision::degraded`]).
    pub allowed: bool,
    /// Attempts left now, on the part with the fewest.
    pub remaining: u64,
    /// When that part next has more budget, on the store's clock (ms).
    pub reset_at: Millis,
    /// For a limited attempt: how long until one would be allowed.
    pub retry_after: Option<Duration>,
    /// The budget of the part that answered.
    pub budget: u64,
    /// The part that answered: the one that ran out, or the one with the
    /// fewest attempts left.
    pub part: &'static str,
    /// That part's window (ms): for a token bucket, the time to refill it.
    pub window: Millis,
    /// The store's time of the decision (ms), to turn `reset_at` into a wait.
    pub now: Millis,
    /// For a limited attempt (or one shadow mode let through): the part that
    /// ran out.
    pub limited_by: Option<&'static str>,
    /// The store was unavailable, and the limit's policy answered. Usually
    /// nothing was counted; but a call that timed out after its `apply` ran
    /// may still commit in the store. Not the same as limited: answer it as a
    /// fault of your own (HTTP 503), not as the client's (HTTP 429).
    pub degraded: Option<Unavailable>,
    /// Shadow mode let through an attempt it would have refused.
    pub shadow_refused: bool,
    /// What each part has left, in the limit's order, for a limit of more
    /// than one part; `None` for a limit of one, whose part is the one the
    /// fields above describe (see [`Decision::parts`]). Kept out of the
    /// usual count's way: a limit of one part makes no list, and the field
    /// is one pointer wide, since every decision writes it.
    #[allow(clippy::box_collection)] // one pointer, not a `Vec`'s three words
    pub(crate) others: Option<Box<Vec<PartLeft>>>,
}

/// What one part of a limit has left after an attempt: its budget, the
/// attempts left, and when it next has more. After an allowed attempt, what
/// is left once it counted; after a refused one or a check (cost 0), what
/// is left now, since nothing was counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PartLeft {
    /// The part.
    pub part: &'static str,
    /// Its budget.
    pub budget: u64,
    /// Attempts (units of cost) left on it.
    pub remaining: u64,
    /// When it next has more budget, on the store's clock (ms).
    pub reset_at: Millis,
}

impl Decision {
    /// True when the attempt ran out of budget (not when the store was unavailable).
    pub fn is_limited(&self) -> bool {
        !self.allowed && self.degraded.is_none()
    }

    /// What each part of the limit has left, one per part in the limit's
    /// order: what a client shows as "3 of 5 left for this account". When
    /// the store was unavailable ([`Decision::degraded`]), nothing is known
    /// to be left: 0 on each part.
    pub fn parts(&self) -> Vec<PartLeft> {
        match &self.others {
            Some(parts) => parts.as_ref().clone(),
            None => vec![PartLeft {
                part: self.part,
                budget: self.budget,
                remaining: self.remaining,
                reset_at: self.reset_at,
            }],
        }
    }
}

/// How often each answer was given, since the limits were built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimitCounters {
    /// Attempts allowed and counted (and checks of cost 0 that would be).
    pub allowed: u64,
    /// Attempts refused for lack of budget.
    pub limited: u64,
    /// Attempts answered by the unavailable policy.
    pub degraded: u64,
    /// Attempts shadow mode let through that would have been refused.
    pub shadow_refused: u64,
}
