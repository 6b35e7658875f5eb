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
pub fn check(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, lock: Millis) -> Outcome {
    let (count, end) =
        match entry.filter(|e| e.expires_at > now).and_then(|e| e.value.as_u64().map(|c| (c, e.expires_at))) {
            Some(found) => found,
            None => (0, now.saturating_add(window)),
        };
    let left = budget.saturating_sub(count);
    if left == 0 {
        // Locked: refused until the lock ends; the refusal writes nothing, so
        // trying during the lock does not lengthen it.
        return Outcome::refused(0, end, end, now);
    }
    let count = count + 1;
    let expires_at = if left == 1 { end.max(now.saturating_add(lock)) } else { end };
    Outcome::counted(left - 1, expires_at, Entry { value: Value::from(count), expires_at })
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
}
