//! Fixed and sliding windows.
//!
//! Stored values stay small, since they are JSON in the store and cross the
//! network on every count:
//! - fixed window: the count (`3`), or `[count, last]` with a cooldown, where
//!   `last` is when the last allowed attempt was made; the entry expires when
//!   the window ends;
//! - sliding window: the allowed attempts still in the window, as the oldest
//!   time followed by each one's distance from it (`[t0, 0, 1200, 5000]`); an
//!   attempt of cost `n` > 1 is one item `[distance, n]` (`[t0, 0, [1200, 3]]`),
//!   which an earlier release of this crate reads as no attempts; the entry
//!   expires one window after the newest.
//!
//! A value of another shape (left by an earlier algorithm of the same limit) is
//! read as no attempts.

use serde_json::Value;

use crate::{Entry, Millis};

use super::outcome::Outcome;

/// Most attempts a sliding window keeps: its stored value is the list of them,
/// and it must stay well under the store's 4096-byte value limit.
pub(crate) const MAX_SLIDING_BUDGET: u64 = 256;
/// Longest window, lock or cooldown of any algorithm: 100 years. A sliding
/// window's stored value keeps each attempt as an offset from the oldest, at
/// most two windows, so 256 of them stay under the store's 4096-byte value
/// limit only for windows up to about 150 years.
pub(crate) const MAX_WINDOW: Millis = 100 * 365 * 86_400_000;

/// One attempt on a fixed window of `budget` per `window` opened by the first
/// attempt, with at least `cooldown` ms between allowed attempts.
///
/// An allowed attempt inside the window's last `cooldown` keeps the window open
/// until its cooldown ends, so the cooldown can't be skipped by waiting for the
/// window to close; the window only ever gets longer, never looser.
#[inline]
#[cfg(test)]
pub fn fixed(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, cooldown: Millis) -> Outcome {
    fixed_cost(entry, now, budget, window, cooldown, 1)
}

/// [`fixed`] for an attempt that counts `cost` at once (0: a check). With a
/// cooldown, one allowed attempt of cost `n` starts one cooldown, where `n`
/// attempts of cost 1 would each wait out their own.
pub fn fixed_cost(
    entry: Option<&Entry>,
    now: Millis,
    budget: u64,
    window: Millis,
    cooldown: Millis,
    cost: u64,
) -> Outcome {
    let held = entry.filter(|e| e.expires_at > now).and_then(|e| {
        let (count, last) = if cooldown > 0 {
            match e.value.as_array().map(Vec::as_slice) {
                Some([Value::Number(c), Value::Number(l)]) => (c.as_u64(), l.as_i64()),
                _ => (None, None),
            }
        } else {
            (e.value.as_u64(), None)
        };
        count.map(|count| (count, last, e.expires_at))
    });
    let (count, last, end) = held.unwrap_or((0, None, now.saturating_add(window)));
    let left = budget.saturating_sub(count);
    if cost > budget {
        return Outcome::never(left, held.map_or(now, |h| h.2));
    }
    if cost.max(1) > left {
        return Outcome::refused(left, end, end, now);
    }
    if let Some(last) = last {
        let ready_at = last.saturating_add(cooldown);
        if now < ready_at {
            return Outcome::refused(left, end, ready_at, now);
        }
    }
    if cost == 0 {
        return Outcome::checked(left, held.map_or(now, |h| h.2));
    }
    let count = count + cost;
    let (value, expires_at) = if cooldown > 0 {
        (Value::from(vec![Value::from(count), Value::from(now)]), end.max(now.saturating_add(cooldown)))
    } else {
        (Value::from(count), end)
    };
    Outcome::counted(left - cost, expires_at, Entry { value, expires_at })
}

/// The allowed attempts a sliding-window value records, oldest first, as
/// runs of `(time, how many)`: an item is an offset from the first number
/// (one attempt), or `[offset, n]` (n attempts at once, written by a cost).
fn attempts(value: &Value) -> Vec<(Millis, u64)> {
    let Some(items) = value.as_array() else {
        return Vec::new();
    };
    let Some(Some(base)) = items.first().map(Value::as_i64) else {
        return Vec::new();
    };
    let mut runs = Vec::with_capacity(items.len() - 1);
    for item in &items[1..] {
        let run = match item {
            Value::Number(offset) => offset.as_i64().map(|o| (o, 1)),
            Value::Array(pair) => match pair.as_slice() {
                [Value::Number(offset), Value::Number(n)] => offset.as_i64().zip(n.as_u64()).filter(|&(_, n)| n >= 1),
                _ => None,
            },
            _ => None,
        };
        match run {
            Some((offset, n)) => runs.push((base.saturating_add(offset), n)),
            None => return Vec::new(),
        }
    }
    runs
}

/// When `k` (at least 1) of the recorded attempts have left the window:
/// `runs` are sorted oldest first and hold at least `k` attempts.
fn leaves_at(runs: &[(Millis, u64)], k: u64, window: Millis, now: Millis) -> Millis {
    let mut gone = 0u64;
    for &(t, n) in runs {
        gone = gone.saturating_add(n);
        if gone >= k {
            return t.saturating_add(window);
        }
    }
    now
}

/// One attempt on a sliding window of `budget` attempts in any `window`.
///
/// Only allowed attempts are recorded; a refused one writes nothing, so it
/// never pushes its own window out, and nothing is ever rolled back.
#[inline]
#[cfg(test)]
pub fn sliding(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis) -> Outcome {
    sliding_cost(entry, now, budget, window, 1)
}

/// [`sliding`] for an attempt that counts `cost` at once (0: a check): it is
/// recorded as `cost` attempts at `now`, in one item of the stored value.
pub fn sliding_cost(entry: Option<&Entry>, now: Millis, budget: u64, window: Millis, cost: u64) -> Outcome {
    let mut runs = entry.filter(|e| e.expires_at > now).map(|e| attempts(&e.value)).unwrap_or_default();
    // An attempt at `t` counts while `now < t + window`. One recorded more
    // than a window ahead of the clock is no attempt a clock made (a step
    // back is seconds): it counts as made a window ahead, so a corrupt or
    // foreign value can't grow the offsets past what the store can hold.
    runs.retain(|&(t, _)| t.saturating_add(window) > now);
    let latest = now.saturating_add(window);
    runs.iter_mut().for_each(|(t, _)| *t = (*t).min(latest));
    runs.sort_by_key(|&(t, _)| t);
    let count = runs.iter().fold(0u64, |sum, &(_, n)| sum.saturating_add(n));
    let left = budget.saturating_sub(count);
    // The oldest attempts leave first: the part has more budget once one
    // more than its surplus (after a lowered budget) has left.
    let more_at = |runs: &[(Millis, u64)]| match count {
        0 => now,
        _ => leaves_at(runs, count.saturating_sub(budget).saturating_add(1), window, now),
    };
    if cost > budget {
        return Outcome::never(left, more_at(&runs));
    }
    let need = cost.max(1);
    if need > left {
        // Allowed once enough have left to bring the count to `budget - need`.
        let frees_at = leaves_at(&runs, count.saturating_add(need) - budget, window, now);
        return Outcome::refused(left, more_at(&runs), frees_at, now);
    }
    if cost == 0 {
        return Outcome::checked(left, more_at(&runs));
    }
    let at = runs.partition_point(|&(t, _)| t <= now);
    runs.insert(at, (now, cost));
    let base = runs[0].0;
    let mut items = Vec::with_capacity(runs.len() + 1);
    items.push(Value::from(base));
    items.extend(runs.iter().map(|&(t, n)| match n {
        1 => Value::from(t - base),
        n => Value::from(vec![Value::from(t - base), Value::from(n)]),
    }));
    let newest = runs[runs.len() - 1].0;
    Outcome::counted(
        left - cost,
        base.saturating_add(window),
        Entry { value: Value::from(items), expires_at: newest.saturating_add(window) },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Write;
    use serde_json::json;

    const W: Millis = 60_000;
    const T0: Millis = 1_700_000_000_000;

    fn entry(o: &Outcome) -> Entry {
        match &o.write {
            Write::Put(e) => e.clone(),
            other => panic!("expected a put, got {other:?}"),
        }
    }

    /// Runs attempts at `times` on `f`, keeping what each allowed one wrote.
    fn run(mut f: impl FnMut(Option<&Entry>, Millis) -> Outcome, times: &[Millis]) -> (Vec<bool>, Option<Entry>) {
        let mut current: Option<Entry> = None;
        let mut seen = Vec::new();
        for &now in times {
            let live = current.clone().filter(|e| e.expires_at > now);
            let o = f(live.as_ref(), now);
            if o.allowed {
                current = Some(entry(&o));
            } else {
                assert_eq!(o.write, Write::Keep, "a refused attempt writes nothing");
            }
            seen.push(o.allowed);
        }
        (seen, current)
    }

    #[test]
    fn fixed_first_and_last_allowed_then_refused_until_the_window_ends() {
        let first = fixed(None, T0, 3, W, 0);
        assert!(first.allowed);
        assert_eq!(first.remaining, 2);
        assert_eq!(first.reset_at, T0 + W);
        assert_eq!(entry(&first), Entry { value: json!(1), expires_at: T0 + W });

        let (seen, kept) = run(|e, now| fixed(e, now, 3, W, 0), &[T0, T0 + 1, T0 + W - 1]);
        assert_eq!(seen, [true, true, true], "the last allowed is the budget-th");
        let kept = kept.unwrap();
        assert_eq!(kept.value, json!(3));
        // One millisecond before the window ends: refused, with the wait to its end.
        let refused = fixed(Some(&kept), T0 + W - 1, 3, W, 0);
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, Some(1));
        assert_eq!(refused.reset_at, T0 + W);
        // At the end the entry is no longer live: a fresh window.
        let next = fixed(Some(&kept), T0 + W, 3, W, 0);
        assert!(next.allowed);
        assert_eq!(next.remaining, 2);
        assert_eq!(next.reset_at, T0 + 2 * W);
    }

    #[test]
    fn fixed_cooldown_spaces_attempts_and_outlasts_the_window() {
        let cd = 10_000;
        let (seen, kept) = run(|e, now| fixed(e, now, 5, W, cd), &[T0, T0 + cd - 1, T0 + cd, T0 + W - 1]);
        assert_eq!(seen, [true, false, true, true]);
        let kept = kept.unwrap();
        assert_eq!(kept.value, json!([3, T0 + W - 1]));
        // The last attempt came 1 ms before the window's end: the entry lives
        // until its cooldown is over, so the cooldown holds across the edge.
        assert_eq!(kept.expires_at, T0 + W - 1 + cd);
        let o = fixed(Some(&kept), T0 + W, 5, W, cd);
        assert!(!o.allowed);
        assert_eq!(o.remaining, 2, "a cooldown refusal leaves the budget");
        assert_eq!(o.retry_after, Some(cd - 1));
        assert!(fixed(Some(&kept), T0 + W - 1 + cd, 5, W, cd).allowed);
    }

    #[test]
    fn fixed_reads_a_value_of_another_shape_as_fresh() {
        let odd = Entry { value: json!({"n": 9}), expires_at: T0 + 5 };
        let o = fixed(Some(&odd), T0, 2, W, 0);
        assert!(o.allowed);
        assert_eq!(o.remaining, 1);
    }

    #[test]
    fn sliding_counts_only_allowed_attempts() {
        // Budget 2 per minute: attempts at 0 and 30 s are allowed, the one at
        // 59.999 s is refused and must not extend anything.
        let (seen, kept) = run(|e, now| sliding(e, now, 2, W), &[T0, T0 + 30_000, T0 + W - 1]);
        assert_eq!(seen, [true, true, false]);
        let kept = kept.unwrap();
        assert_eq!(kept.value, json!([T0, 0, 30_000]));
        assert_eq!(kept.expires_at, T0 + 30_000 + W);
        // At the oldest attempt's edge it leaves the window: allowed again.
        let refused_at_edge = sliding(Some(&kept), T0 + W - 1, 2, W);
        assert_eq!(refused_at_edge.retry_after, Some(1));
        assert_eq!(refused_at_edge.reset_at, T0 + W);
        let o = sliding(Some(&kept), T0 + W, 2, W);
        assert!(o.allowed);
        assert_eq!(o.remaining, 0);
        assert_eq!(entry(&o).value, json!([T0 + 30_000, 0, 30_000]));
        assert_eq!(o.reset_at, T0 + 30_000 + W);
    }

    #[test]
    fn sliding_refusals_never_extend_their_window() {
        // A client hammering a spent window gets in as soon as the first
        // allowed attempt leaves it, however often it was refused meanwhile.
        let mut times = vec![T0];
        times.extend((1..60).map(|s| T0 + s * 1_000));
        times.push(T0 + W);
        let (seen, _) = run(|e, now| sliding(e, now, 1, W), &times);
        assert!(seen[0]);
        assert!(seen[1..60].iter().all(|a| !a));
        assert!(seen[60]);
    }

    #[test]
    fn sliding_after_a_lowered_budget_waits_for_enough_to_leave() {
        // Recorded under a budget of 3; now the budget is 1: two must leave.
        let e = Entry { value: json!([T0, 0, 10, 20]), expires_at: T0 + 20 + W };
        let o = sliding(Some(&e), T0 + 100, 1, W);
        assert!(!o.allowed);
        assert_eq!(o.reset_at, T0 + 20 + W);
    }

    #[test]
    fn sliding_value_fits_the_store_whatever_times_it_read() {
        // A corrupt or foreign value: attempts recorded far in the future.
        let budget = MAX_SLIDING_BUDGET;
        let mut value = vec![json!(T0)];
        value.extend((0..budget - 1).map(|i| json!(i64::MAX - i64::try_from(i).unwrap())));
        let e = Entry { value: json!(value), expires_at: i64::MAX };
        let o = sliding(Some(&e), T0, budget, 15 * W);
        assert!(o.allowed);
        let size = crate::rules::value_size(&entry(&o).value);
        assert!(size <= crate::MAX_VALUE_BYTES, "{size} bytes");
        // They still count: none left after this one.
        assert_eq!(o.remaining, 0);
    }

    #[test]
    fn sliding_value_stays_compact_at_the_largest_budget() {
        let budget = MAX_SLIDING_BUDGET;
        let mut current: Option<Entry> = None;
        let day = 86_400_000;
        for i in 0..budget {
            let now = T0 + i64::try_from(i).unwrap() * 300_000;
            let o = sliding(current.as_ref(), now, budget, day);
            assert!(o.allowed);
            current = Some(entry(&o));
        }
        // Offsets of up to 8 digits here; even 13-digit offsets would fit.
        let size = crate::rules::value_size(&current.unwrap().value);
        assert!(size < crate::MAX_VALUE_BYTES * 3 / 5, "{size} bytes");
    }

    #[test]
    fn sliding_cost_is_one_item_and_cost_one_keeps_the_earlier_form() {
        let one = entry(&sliding(None, T0, 5, W));
        let o = sliding_cost(Some(&one), T0 + 1_200, 5, W, 3);
        assert!(o.allowed);
        assert_eq!(o.remaining, 1);
        let three = entry(&o);
        assert_eq!(three.value, json!([T0, 0, [1_200, 3]]));
        // Attempts of cost 1 add plain offsets, read beside the run.
        let o = sliding(Some(&three), T0 + 1_200, 5, W);
        assert_eq!(entry(&o).value, json!([T0, 0, [1_200, 3], 1_200]));
        assert_eq!(o.remaining, 0);
        // The first leaves at T0 + W; the three at once only at T0 + 1200 + W.
        let refused = sliding_cost(Some(&entry(&o)), T0 + W - 1, 5, W, 2);
        assert!(!refused.allowed);
        assert_eq!(refused.remaining, 0);
        assert_eq!(refused.reset_at, T0 + W, "one more fits as soon as the oldest leaves");
        assert_eq!(refused.retry_after, Some(1_201), "two fit once the run of three leaves too");
    }

    #[test]
    fn fixed_cost_starts_one_cooldown() {
        let cd = 10_000;
        let o = fixed_cost(None, T0, 5, W, cd, 3);
        assert!(o.allowed);
        assert_eq!(o.remaining, 2);
        assert_eq!(entry(&o).value, json!([3, T0]));
        let early = fixed_cost(Some(&entry(&o)), T0 + 1, 5, W, cd, 1);
        assert_eq!(early.retry_after, Some(cd - 1));
        // A check during the cooldown answers the refusal an attempt would get.
        let check = fixed_cost(Some(&entry(&o)), T0 + 1, 5, W, cd, 0);
        assert_eq!((check.allowed, check.remaining, check.write), (false, 2, Write::Keep));
    }
}
