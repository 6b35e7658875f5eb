//! What one attempt answers: each part's [`Outcome`], and the [`Verdict`]
//! that [`join`] makes of them. The algorithms produce outcomes; nothing here
//! depends on which algorithm did.
//!
//! An attempt may count more than one ([`Algorithm::check_cost`](super::Algorithm::check_cost)):
//! - cost `n` is allowed only when all `n` fit, and then counts `n` at once;
//! - cost 0 is a check: it writes nothing, is allowed when an attempt of cost
//!   1 would be, and answers what is left now;
//! - a cost over a part's budget can never fit: it is refused with no
//!   `retry_after`, since no wait would do.

use crate::{Entry, Millis, Write};

/// One part's answer to one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The part has budget left for this attempt.
    pub allowed: bool,
    /// Attempts left after this one (when counted) or now (when refused, or
    /// for a check of cost 0).
    pub remaining: u64,
    /// When the part next has more budget: the window's end, or when the
    /// oldest recorded attempt leaves a sliding window; for a check, `now`
    /// when nothing is held.
    pub reset_at: Millis,
    /// For a refused attempt: how long until it would be allowed, in ms;
    /// `None` when it never would (its cost is over the budget).
    pub retry_after: Option<Millis>,
    /// What to write when the attempt is counted; `Keep` when refused, but
    /// for a GCRA whose budget or window a reload changed: what it holds,
    /// kept on the new interval (counting nothing).
    pub write: Write,
}

impl Outcome {
    pub(crate) fn refused(remaining: u64, reset_at: Millis, allowed_at: Millis, now: Millis) -> Self {
        Outcome {
            allowed: false,
            remaining,
            reset_at,
            retry_after: Some(allowed_at.saturating_sub(now).max(1)),
            write: Write::Keep,
        }
    }

    pub(crate) fn counted(remaining: u64, reset_at: Millis, entry: Entry) -> Self {
        Outcome { allowed: true, remaining, reset_at, retry_after: None, write: Write::Put(entry) }
    }

    /// A check (cost 0) that an attempt would pass: nothing is written.
    pub(crate) fn checked(remaining: u64, reset_at: Millis) -> Self {
        Outcome { allowed: true, remaining, reset_at, retry_after: None, write: Write::Keep }
    }

    /// An attempt whose cost is over the budget: refused, now and always.
    pub(crate) fn never(remaining: u64, reset_at: Millis) -> Self {
        Outcome { allowed: false, remaining, reset_at, retry_after: None, write: Write::Keep }
    }
}

/// The joined answer of every part of one attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Every part had budget left; the attempt was counted on each.
    pub allowed: bool,
    /// The fewest attempts left on any part.
    pub remaining: u64,
    /// `reset_at` of the part that answered (see [`Verdict::part`]).
    pub reset_at: Millis,
    /// For a refused attempt: the longest wait any refusing part asks for, in
    /// ms; `None` when a part never allows it (its cost is over the budget).
    pub retry_after: Option<Millis>,
    /// Index of the part that answered: the refusing part with the longest
    /// wait, or the part with the fewest attempts left.
    pub part: usize,
}

impl Verdict {
    /// Refused because the cost is over some part's budget: no wait would do.
    pub fn never_fits(&self) -> bool {
        !self.allowed && self.retry_after.is_none()
    }
}

/// Joins the parts' outcomes of one attempt into the writes (every part's
/// write when all allow, else only what a refusing part keeps: see
/// [`Outcome::write`]) and one verdict.
pub fn join(outcomes: Vec<Outcome>, now: Millis) -> (Vec<Write>, Verdict) {
    join_all(outcomes, now)
}

/// [`join`] over any owned list of outcomes: `decide` keeps them on the stack.
pub(crate) fn join_all<L>(outcomes: L, now: Millis) -> (Vec<Write>, Verdict)
where
    L: AsRef<[Outcome]> + IntoIterator<Item = Outcome>,
{
    let verdict = verdict(outcomes.as_ref(), now);
    let mut writes = Vec::with_capacity(outcomes.as_ref().len());
    if verdict.allowed {
        writes.extend(outcomes.into_iter().map(|o| o.write));
    } else {
        // A part that would have counted counts nothing; a refusing part
        // writes only what it keeps.
        writes.extend(outcomes.into_iter().map(|o| if o.allowed { Write::Keep } else { o.write }));
    }
    (writes, verdict)
}

/// [`join`] of a limit of one part, without a list.
pub(crate) fn join_one(outcome: Outcome) -> (Vec<Write>, Verdict) {
    let (write, verdict) = split_one(outcome);
    (vec![write], verdict)
}

/// The write and the verdict of a limit of one part.
pub(crate) fn split_one(outcome: Outcome) -> (Write, Verdict) {
    let verdict = Verdict {
        allowed: outcome.allowed,
        remaining: outcome.remaining,
        reset_at: outcome.reset_at,
        retry_after: outcome.retry_after,
        part: 0,
    };
    (outcome.write, verdict)
}

/// The verdict of one attempt over its parts' outcomes.
fn verdict(outcomes: &[Outcome], now: Millis) -> Verdict {
    let allowed = outcomes.iter().all(|o| o.allowed);
    let part = if allowed {
        // The tightest part speaks for the attempt.
        (0..outcomes.len())
            .min_by_key(|&i| (outcomes[i].remaining, std::cmp::Reverse(outcomes[i].reset_at)))
            .unwrap_or(0)
    } else {
        // A part that never allows the cost waits longest of all.
        (0..outcomes.len())
            .filter(|&i| !outcomes[i].allowed)
            .max_by_key(|&i| outcomes[i].retry_after.unwrap_or(Millis::MAX))
            .unwrap_or(0)
    };
    Verdict {
        allowed,
        remaining: outcomes.iter().map(|o| o.remaining).min().unwrap_or(0),
        reset_at: outcomes.get(part).map_or(now, |o| o.reset_at),
        retry_after: outcomes.get(part).and_then(|o| o.retry_after),
        part,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Entry;

    #[test]
    fn one_part_joins_as_a_list_of_one_does() {
        let outcomes = [
            Outcome::counted(3, 1_000, Entry { value: 7.into(), expires_at: 1_000 }),
            Outcome::refused(0, 2_000, 1_500, 1_000),
        ];
        for outcome in outcomes {
            assert_eq!(join_one(outcome.clone()), join(vec![outcome], 1_000));
        }
    }
}
