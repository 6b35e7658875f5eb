//! A stored row as each database holds it, whatever it holds: corrupt JSON, a
//! wrong generation, a huge or negative expiry, a value of another shape.
//! Decoding never panics, answers a live entry exactly when the row is live
//! and of this store's generation, and `corrupt` exactly when such a row is not
//! JSON; and every algorithm counts on what was decoded without panicking or
//! overflowing, answering within its budget.

#![allow(dead_code)] // each user takes what it needs

use std::time::Duration;

use limit_store::fuzzing::{decode_redis_value, decode_sql_row};
use limit_store::limits::{presets, Algorithm};
use limit_store::{Entry, Millis, Write, MAX_VALUE_BYTES};

/// A store's clock stays in this range: from the epoch to the year 5138.
pub const MAX_NOW: Millis = 100_000_000_000_000;

/// One row, and the clock and generation of the store that reads it.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// The row's `generation` column.
    pub generation: i64,
    /// The row's `value` column (Redis: the part after `<expires_at>|`).
    pub value: &'a str,
    /// The row's `expires_at` column.
    pub expires_at: Millis,
    /// The database's clock, in `0..=MAX_NOW`.
    pub now: Millis,
    /// The reading store's generation.
    pub store_generation: i64,
}

impl<'a> Input<'a> {
    /// The fuzzer's bytes: three little-endian i64 (generation, expiry, now),
    /// a flag choosing the store's generation, then the value.
    pub fn from_bytes(data: &'a [u8]) -> Option<Self> {
        let number = |at: usize| Some(i64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?));
        let (generation, expires_at, now) = (number(0)?, number(8)?, number(16)?);
        let flag = *data.get(24)?;
        let value = std::str::from_utf8(&data[25..]).ok()?;
        let store_generation = if flag & 1 == 0 { generation } else { generation.wrapping_add(1) };
        Some(Input { generation, value, expires_at, now: now.rem_euclid(MAX_NOW + 1), store_generation })
    }
}

/// The presets, as the guide names them.
const PRESETS: [&str; 5] = ["sign-in", "password-reset", "code-sent", "code-verify", "api"];

/// The algorithms a decoded entry is counted with: every preset's parts, and
/// the extremes a builder accepts (and GCRAs it refuses, which must not panic
/// either).
pub fn algorithms() -> Vec<Algorithm> {
    let mut all: Vec<Algorithm> = PRESETS
        .iter()
        .flat_map(|name| {
            presets::named(name).unwrap().parts().iter().map(|p| p.algorithm().clone()).collect::<Vec<_>>()
        })
        .collect();
    let (ms, long) = (Duration::from_millis(1), Duration::from_millis(u64::MAX));
    // The longest window a sliding window takes: 100 years.
    let century = Duration::from_millis(100 * 365 * 86_400_000);
    all.extend([
        Algorithm::fixed_window(1, ms),
        Algorithm::fixed_window(u64::MAX, long),
        Algorithm::FixedWindow { budget: u64::MAX, window: Millis::MAX, cooldown: Millis::MAX },
        Algorithm::sliding_window(256, century),
        Algorithm::sliding_window(256, Duration::from_secs(900)),
        Algorithm::sliding_window(1, ms),
        Algorithm::lockout(u64::MAX, long, long),
        Algorithm::lockout(1, ms, ms),
        Algorithm::gcra(1, long),
        Algorithm::gcra(1, ms),
        Algorithm::gcra(u64::MAX / 2, long),
    ]);
    all
}

/// Checks every property on one input, for the SQL stores and for Redis.
pub fn check(input: &Input<'_>) {
    let live = input.generation == input.store_generation && input.expires_at > input.now;
    let json = serde_json::from_str::<serde_json::Value>(input.value).ok();
    let sql = decode_sql_row(input.generation, input.value, input.expires_at, input.now, input.store_generation);
    match (&sql, live, &json) {
        (Ok(None), false, _) => {}
        (Ok(Some(entry)), true, Some(value)) => {
            assert_eq!(entry, &Entry { value: value.clone(), expires_at: input.expires_at })
        }
        (Err(e), true, None) => assert!(matches!(e, limit_store::StoreError::Corrupt { .. }), "{e}"),
        other => panic!("SQL row {input:?}: {other:?}"),
    }
    let stored = format!("{}|{}", input.expires_at, input.value);
    let redis = decode_redis_value(stored.as_bytes(), input.now);
    let live = input.expires_at > input.now;
    match (&redis, live, &json) {
        (Ok(None), false, Some(_)) => {}
        (Ok(Some(entry)), true, Some(value)) => {
            assert_eq!(entry, &Entry { value: value.clone(), expires_at: input.expires_at })
        }
        (Err(e), _, None) => assert!(matches!(e, limit_store::StoreError::Corrupt { .. }), "{e}"),
        other => panic!("Redis value {stored:?}: {other:?}"),
    }
    // Raw bytes as Redis may hold them: never a panic.
    let _ = decode_redis_value(input.value.as_bytes(), input.now);
    let entry = match (sql, json) {
        (Ok(Some(entry)), _) => entry,
        // Count on the value as if live, whatever its expiry: the algorithms
        // must hold up on any JSON a store hands them.
        (_, Some(value)) => Entry { value, expires_at: input.expires_at.max(input.now.saturating_add(1)) },
        (_, None) => return,
    };
    for algorithm in algorithms() {
        count(&algorithm, &entry, input.now);
    }
}

/// One attempt on `entry`: an answer within the budget, a wait of at least
/// 1 ms when refused, and a value that fits the store when allowed.
fn count(algorithm: &Algorithm, entry: &Entry, now: Millis) {
    let outcome = algorithm.check_cost(Some(entry), now, 1);
    assert!(
        outcome.remaining < algorithm.budget() || !outcome.allowed && outcome.remaining <= algorithm.budget(),
        "{algorithm:?} on {entry:?} at {now}: {outcome:?}"
    );
    let refused_in_place = || outcome.retry_after.is_some_and(|w| w >= 1);
    match (&outcome.write, outcome.allowed) {
        (Write::Put(e), allowed) => {
            let size = serde_json::to_vec(&e.value).map_or(usize::MAX, |v| v.len());
            assert!(size <= MAX_VALUE_BYTES, "{algorithm:?}: a value of {size} bytes");
            // A refusal writes only on a GCRA counted at another rate: the
            // TAT it holds, rescaled to the rate now, so that it refills so.
            assert!(
                allowed || matches!(algorithm, Algorithm::Gcra { .. }) && refused_in_place(),
                "{algorithm:?} on {entry:?} at {now}: {outcome:?}"
            );
        }
        (Write::Keep, false) => {
            assert!(refused_in_place(), "{algorithm:?} on {entry:?} at {now}: {outcome:?}")
        }
        _ => panic!("{algorithm:?} on {entry:?} at {now}: {outcome:?}"),
    }
    // The next attempt on what was written, a moment later: never a panic.
    if let Write::Put(e) = &outcome.write {
        let _ = algorithm.check_cost(Some(e), now.saturating_add(1), 1);
    }
}
