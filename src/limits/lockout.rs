//! Lockout: `budget` attempts per window, and the attempt that uses the last of
//! the budget locks the part for a while from then on.
//!
//! The app counts every attempt and calls [`Limits::reset`](crate::Limits::reset)
//! on a success, so what is left over are failures. The stored value is the
//! count alone; the entry expires at the end of the window, or of the lock
//! once the part is locked.

use serde_json::Value;

use crate::{Entry, Millis};

use super::outcome::Outcome;

/// One attempt on a lockout of `budget` attempts per `window`, locking for `lock`.
#[inline]
#[cfg(test)]
pub fn check(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, lock: Millis) -> Outcome {
    check_cost(entry, now, budget, window, lock, 1)
}

/// [`check`] for an attempt that counts `cost` failures at once (0: a check).
///
/// The attempt that uses the last of the budget locks the part, whatever its
/// cost. One whose cost doesn't fit in what is left is refused like any other
/// refusal: it writes nothing and doesn't lock, since it was not counted (a
/// lock is earned by failures that were counted), and the smaller attempts
/// that still fit go on until the window ends.
pub fn check_cost(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, lock: Millis, cost: u64) -> Outcome {
    let held = entry.filter(|e| e.expires_at > now).and_then(|e| e.value.as_u64().map(|c| (c, e.expires_at)));
    let (count, end) = held.unwrap_or((0, now.saturating_add(window)));
    let left = budget.saturating_sub(count);
    if cost > budget {
        return Outcome::never(left, held.map_or(now, |h| h.1));
    }
    if cost.max(1) > left {
        // Locked (nothing left), or too little left for this cost: refused
        // until the lock or the window ends; the refusal writes nothing, so
        // trying during the lock does not lengthen it.
        return Outcome::refused(left, end, end, now);
    }
    if cost == 0 {
        return Outcome::checked(left, held.map_or(now, |h| h.1));
    }
    let count = count + cost;
    let expires_at = if left == cost { end.max(now.saturating_add(lock)) } else { end };
    Outcome::counted(left - cost, expires_at, Entry { value: Value::from(count), expires_at })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Write;
    use serde_json::json;

    const MIN: Millis = 60_000;
    const T0: Millis = 1_700_000_000_000;

    fn put(o: &Outcome) -> Entry {
        match &o.write {
            Write::Put(e) => e.clone(),
            other => panic!("expected a put, got {other:?}"),
        }
    }

    #[test]
    fn the_last_allowed_attempt_locks_for_the_lock_time() {
        let (budget, window, lock) = (3, 15 * MIN, 60 * MIN);
        let a = check(None, T0, budget, window, lock);
        assert!(a.allowed);
        assert_eq!(a.remaining, 2);
        assert_eq!(put(&a).expires_at, T0 + window);
        let b = check(Some(&put(&a)), T0 + MIN, budget, window, lock);
        assert_eq!(put(&b), Entry { value: json!(2), expires_at: T0 + window });
        // The third is still allowed (the budget-th), and locks from its own time.
        let c = check(Some(&put(&b)), T0 + 2 * MIN, budget, window, lock);
        assert!(c.allowed);
        assert_eq!(c.remaining, 0);
        let locked = put(&c);
        assert_eq!(locked.expires_at, T0 + 2 * MIN + lock);
        assert_eq!(c.reset_at, locked.expires_at);

        // During the lock, even past the window: refused, nothing written.
        let d = check(Some(&locked), T0 + window + 1, budget, window, lock);
        assert!(!d.allowed);
        assert_eq!(d.write, Write::Keep);
        assert_eq!(d.retry_after, Some(locked.expires_at - (T0 + window + 1)));
        // One millisecond before the lock ends, refused; at its end, the entry
        // is gone and a fresh window opens.
        let e = check(Some(&locked), locked.expires_at - 1, budget, window, lock);
        assert_eq!(e.retry_after, Some(1));
        let f = check(Some(&locked), locked.expires_at, budget, window, lock);
        assert!(f.allowed);
        assert_eq!(f.remaining, 2);
    }

    #[test]
    fn a_window_that_ends_before_the_budget_is_spent_never_locks() {
        let (budget, window, lock) = (2, 10 * MIN, 60 * MIN);
        let a = put(&check(None, T0, budget, window, lock));
        // The window ends: the count starts over, no lock.
        let b = check(Some(&a), T0 + window, budget, window, lock);
        assert!(b.allowed);
        assert_eq!(b.remaining, 1);
        assert_eq!(put(&b).expires_at, T0 + 2 * window);
    }

    #[test]
    fn a_lock_shorter_than_the_window_lasts_to_the_window_end() {
        let a = put(&check(None, T0, 1, 10 * MIN, MIN));
        assert_eq!(a.expires_at, T0 + 10 * MIN);
    }

    #[test]
    fn a_cost_that_does_not_fit_neither_counts_nor_locks() {
        let (budget, window, lock) = (5, 15 * MIN, 60 * MIN);
        let three = put(&check_cost(None, T0, budget, window, lock, 3));
        let o = check_cost(Some(&three), T0 + MIN, budget, window, lock, 3);
        assert!(!o.allowed);
        assert_eq!(o.write, Write::Keep, "not counted, so no lock");
        assert_eq!(o.remaining, 2);
        assert_eq!(o.retry_after, Some(window - MIN), "three fit again when the window ends");
        // The two left still go through, and the one that uses the last locks.
        let two = check_cost(Some(&three), T0 + MIN, budget, window, lock, 2);
        assert!(two.allowed);
        assert_eq!(put(&two).expires_at, T0 + MIN + lock);
    }
}
