//! A reload that changes a GCRA's budget or window applies to what each key
//! holds: the attempts held are counted again on the new interval.

use super::*;

const T0: Millis = 1_700_000_000_000;
const HOUR: Millis = 3_600_000;

/// `n` attempts of a key holding `entry` at `now`, at `budget` per `window`:
/// how many were allowed, and what the key holds after them.
fn attempts(mut entry: Option<Entry>, now: Millis, budget: u64, window: Millis, n: u32) -> (u32, Option<Entry>) {
    let mut allowed = 0;
    for _ in 0..n {
        let o = check(entry.as_ref(), now, budget, window);
        allowed += u32::from(o.allowed);
        if let Write::Put(next) = o.write {
            entry = Some(next);
        }
    }
    (allowed, entry)
}

#[test]
fn a_raised_budget_lets_a_key_that_spent_the_old_one_go_on_at_once() {
    let (spent, held) = attempts(None, T0, 3, HOUR, 4);
    assert_eq!(spent, 3);
    // A second on, the budget is 6 an hour: 3 of them are left, no more.
    let (allowed, held) = attempts(held, T0 + 1_000, 6, HOUR, 10);
    assert_eq!(allowed, 3, "raised: goes on at once for the difference");
    assert!(!check(held.as_ref(), T0 + 1_000, 6, HOUR).allowed);
    // Back at 3 an hour, it holds all 3 (and the second that refilled).
    assert!(!check(held.as_ref(), T0 + 2_000, 3, HOUR).allowed);
}

#[test]
fn a_lowered_budget_refuses_a_key_at_once() {
    let (spent, held) = attempts(None, T0, 6, HOUR, 2);
    assert_eq!(spent, 2);
    // 2 an hour: both spent, refused at once.
    let refused = check(held.as_ref(), T0 + 1_000, 2, HOUR);
    assert!(!refused.allowed, "lowered: refused at once");
    assert_eq!(refused.remaining, 0);
    // 3 an hour: one of them is left.
    let (allowed, _) = attempts(held, T0 + 1_000, 3, HOUR, 5);
    assert_eq!(allowed, 1);
}

#[test]
fn a_changed_window_keeps_the_attempts_held() {
    let (spent, held) = attempts(None, T0, 2, HOUR, 2);
    assert_eq!(spent, 2);
    // 2 a day: both still held, over the longer window.
    let day = check(held.as_ref(), T0, 2, 24 * HOUR);
    assert!(!day.allowed, "a longer window keeps the count");
    assert_eq!(day.reset_at, T0 + 12 * HOUR, "one refills at the new interval");
    // 2 a second: both held over the second, then refilled at the new rate.
    let second = check(held.as_ref(), T0 + 1_000, 2, 1_000);
    assert!(!second.allowed, "a shorter window keeps the count");
    let Write::Put(rescaled) = second.write else { panic!("the refusal keeps what is held on the new interval") };
    assert_eq!(rescaled, Entry { value: Value::from(500), expires_at: T0 + 2_000 });
    assert!(check(Some(&rescaled), T0 + 1_500, 2, 1_000).allowed, "one interval of the new window on");
    // Counted again only once: on the new interval, a refusal writes nothing.
    assert_eq!(check(Some(&rescaled), T0 + 1_000, 2, 1_000).write, Write::Keep);
}

#[test]
fn a_key_keeps_its_interval_beside_its_tat() {
    let o = check(None, T0, 10, 1_000);
    assert_eq!(o.write, Write::Put(Entry { value: Value::from(100), expires_at: T0 + 100 }));
}

#[test]
fn a_tat_stored_before_the_interval_was_kept_is_read_at_the_current_rate() {
    // What was written before: the TAT as the value, and its expiry.
    let full = Entry { value: Value::from(T0 + 1_000), expires_at: T0 + 1_000 };
    let refused = check(Some(&full), T0, 10, 1_000);
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(100));
    let half = Entry { value: Value::from(T0 + 500), expires_at: T0 + 500 };
    let (allowed, _) = attempts(Some(half), T0, 10, 1_000, 10);
    assert_eq!(allowed, 5);
}

#[test]
fn what_is_held_is_rounded_up_to_the_millisecond_never_lost() {
    // 3 per second: an interval of 333 ms; one attempt held is 333 ms.
    let rate = GcraStep::new(3, 1_000, 1);
    let held = rate.held(Some((100, T0 + 100)), T0);
    assert_eq!(held, Some(T0 + 333), "one attempt at 100 ms is one at 333 ms");
    let back = GcraStep::new(10, 1_000, 1).held(Some((333, T0 + 1)), T0);
    assert_eq!(back, Some(T0 + 1), "a part of an attempt stays a part, not none");
    // At most a bucket, and at the very ends of time no overflow.
    assert_eq!(rate.held(Some((1, Millis::MAX)), Millis::MIN), Some(Millis::MIN + 999));
    assert_eq!(GcraStep::new(1, Millis::MAX, 1).held(Some((1, Millis::MAX)), 0), Some(Millis::MAX));
}
