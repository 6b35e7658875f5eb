//! One attempt over a limit of several parts, decided with what each part
//! has left ([`Held`]), for the answer's `parts`. A limit of one part needs
//! no list: its verdict says what its part has left.
//!
//! For an allowed attempt each part answers what is left once it counted;
//! for a refused one nothing was counted, so a part that would have allowed
//! it answers what it has left now (its check of cost 0), not what it would
//! have had.

use smallvec::SmallVec;

use crate::{Entry, Millis, Write};

use super::algorithm::{Algorithm, Outcome, Verdict};

/// Each part's attempts left and when it next has more (ms), in the
/// limit's order; `None` for a limit of one part.
pub(super) type Held = Option<Box<[(u64, Millis)]>>;

/// [`decide_cost`](super::algorithm::decide_cost) of an attempt of `cost`
/// on every part, and what each part holds after it.
pub(super) fn decide_held(
    algorithms: &[Algorithm],
    entries: &[Option<Entry>],
    now: Millis,
    cost: u64,
) -> (Vec<Write>, Verdict, Held) {
    if algorithms.len() < 2 {
        let (writes, verdict) = super::algorithm::decide_cost(algorithms.iter(), entries, now, cost);
        return (writes, verdict, None);
    }
    let outcomes: SmallVec<[Outcome; 4]> =
        algorithms.iter().zip(entries).map(|(a, entry)| a.check_cost(entry.as_ref(), now, cost)).collect();
    let allowed = outcomes.iter().all(|o| o.allowed);
    let held = algorithms
        .iter()
        .zip(entries)
        .zip(&outcomes)
        .map(|((a, entry), o)| {
            if allowed || !o.allowed {
                (o.remaining, o.reset_at)
            } else {
                let now_held = a.check_cost(entry.as_ref(), now, 0);
                (now_held.remaining, now_held.reset_at)
            }
        })
        .collect();
    let (writes, verdict) = super::outcome::join_all(outcomes, now);
    (writes, verdict, Some(held))
}

/// What each part of a legacy count holds: its outcome, counted or not
/// (the earlier contract counts refused attempts too).
pub(super) fn held_of(outcomes: &[Outcome]) -> Held {
    (outcomes.len() > 1).then(|| outcomes.iter().map(|o| (o.remaining, o.reset_at)).collect())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIN: Duration = Duration::from_secs(60);

    fn put(writes: Vec<Write>, before: Vec<Option<Entry>>) -> Vec<Option<Entry>> {
        writes
            .into_iter()
            .zip(before)
            .map(|(w, b)| match w {
                Write::Put(e) => Some(e),
                Write::Keep => b,
                Write::Delete => None,
            })
            .collect()
    }

    /// Allowed: each part answers what it has left after the cost. Refused
    /// by one part: the other answers what it has now, not what it would
    /// have had; and a check answers the same as the refusal's parts.
    #[test]
    fn each_part_answers_what_it_holds() {
        let parts = [Algorithm::fixed_window(5, MIN), Algorithm::fixed_window(10, MIN)];
        let (writes, verdict, held) = decide_held(&parts, &[None, None], 1_000, 3);
        assert!(verdict.allowed);
        assert_eq!(held.as_deref(), Some(&[(2, 61_000), (7, 61_000)][..]));
        let entries = put(writes, vec![None, None]);
        let (writes, verdict, held) = decide_held(&parts, &entries, 2_000, 3);
        assert!(!verdict.allowed);
        assert_eq!(writes, vec![Write::Keep, Write::Keep]);
        assert_eq!(held.as_deref(), Some(&[(2, 61_000), (7, 61_000)][..]), "the second part kept its 7");
        let (_, check, checked) = decide_held(&parts, &entries, 2_000, 0);
        assert!(check.allowed);
        assert_eq!(checked, held);
        let one = decide_held(&parts[..1], &[None], 1_000, 3);
        assert!(one.1.allowed && one.2.is_none(), "a limit of one part makes no list");
    }
}
