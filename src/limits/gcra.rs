//! GCRA, the generic cell rate algorithm: a token bucket kept as one number.
//!
//! `budget` attempts per `window` refill evenly, one every `window / budget`
//! ms (the interval), and up to `budget` can be spent at once. The stored value
//! is the theoretical arrival time (TAT): when the bucket would be full again.
//! An attempt at `now` is allowed when `max(tat, now) + interval - now` stays
//! within `budget` intervals; the entry expires at the TAT, since from then on
//! the bucket is full and nothing needs keeping.

use serde_json::Value;

use crate::{Entry, Millis};

use super::outcome::Outcome;

/// Milliseconds between two refilled attempts (0 when the window is too short
/// for the budget; such an algorithm is refused when the limit is built).
pub fn interval(budget: u64, window: Millis) -> Millis {
    match Millis::try_from(budget) {
        Ok(budget) if budget > 0 => window / budget,
        _ => 0,
    }
}

/// One attempt on a GCRA of `budget` per `window`.
pub fn check(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis) -> Outcome {
    let t = interval(budget, window).max(1);
    let capacity = t.saturating_mul(Millis::try_from(budget).unwrap_or(Millis::MAX));
    let tat = entry.filter(|e| e.expires_at > now).and_then(|e| e.value.as_i64()).map_or(now, |tat| tat.max(now));
    let next = tat.saturating_add(t);
    if next - now > capacity {
        // The bucket is empty: allowed again once one interval has refilled.
        let allowed_at = next - capacity;
        let left = (capacity - (tat - now)) / t;
        return Outcome::refused(u64::try_from(left).unwrap_or(0), tat, allowed_at, now);
    }
    let left = u64::try_from((capacity - (next - now)) / t).unwrap_or(0);
    Outcome::counted(left, next, Entry { value: Value::from(next), expires_at: next })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Write;

    const T0: Millis = 1_700_000_000_000;

    fn put(o: &Outcome) -> Option<crate::Entry> {
        match &o.write {
            Write::Put(e) => Some(e.clone()),
            _ => None,
        }
    }

    #[test]
    fn a_full_bucket_allows_exactly_the_budget_at_once() {
        // 10 per second: interval 100 ms, burst 10.
        let mut current = None;
        for expected in (0..10).rev() {
            let o = check(current.as_ref(), T0, 10, 1_000);
            assert!(o.allowed);
            assert_eq!(o.remaining, expected);
            current = put(&o);
        }
        let tat = current.as_ref().unwrap().expires_at;
        assert_eq!(tat, T0 + 1_000, "full again one window later");
        let refused = check(current.as_ref(), T0, 10, 1_000);
        assert!(!refused.allowed);
        assert_eq!(refused.write, Write::Keep);
        assert_eq!(refused.retry_after, Some(100));
        assert_eq!(refused.reset_at, tat);
        // One millisecond early: still refused; at the interval's end: one more.
        assert!(!check(current.as_ref(), T0 + 99, 10, 1_000).allowed);
        let one = check(current.as_ref(), T0 + 100, 10, 1_000);
        assert!(one.allowed);
        assert_eq!(one.remaining, 0);
    }

    #[test]
    fn a_steady_rate_at_the_interval_is_always_allowed() {
        let mut current = None;
        for i in 0..1_000 {
            let o = check(current.as_ref(), T0 + i * 100, 10, 1_000);
            assert!(o.allowed, "attempt {i}");
            assert_eq!(o.remaining, 9);
            current = put(&o);
        }
    }

    #[test]
    fn an_idle_bucket_refills_to_the_budget_not_beyond() {
        let mut current = None;
        for _ in 0..10 {
            current = put(&check(current.as_ref(), T0, 10, 1_000));
        }
        // Long after the TAT the entry is gone: a full bucket, no more.
        let mut allowed = 0;
        let later = T0 + 3_600_000;
        let mut state = current.filter(|e| e.expires_at > later);
        while let Some(e) = put(&check(state.as_ref(), later, 10, 1_000)) {
            state = Some(e);
            allowed += 1;
        }
        assert_eq!(allowed, 10);
    }
}
