//! The proptest twin of the `stored_row` fuzz target
//! (`fuzz/fuzz_targets/stored_row.rs`): the same properties
//! (`properties/stored_row.rs`) on generated rows: corrupt JSON, wrong
//! generations, huge and negative expiries, values of every algorithm's shape.

#[path = "stored_row.rs"]
mod stored_row;

use std::sync::Arc;
use std::time::Duration;

use limit_store::limits::{Algorithm, Part};
use limit_store::{Limit, Limits, MemoryStore};
use proptest::prelude::*;
use stored_row::MAX_NOW;

/// A number an algorithm might find where it keeps a count or a time.
fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (0..=MAX_NOW).prop_map(|n| n.to_string()),
        prop::sample::select(vec!["0", "-1", "1e400", "1.5", "-0", "18446744073709551616"]).prop_map(str::to_owned),
    ]
}

/// A value column: every algorithm's shape with extreme numbers, and corrupt text.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        number(),
        prop::collection::vec(number(), 0..6).prop_map(|n| format!("[{}]", n.join(","))),
        prop::collection::vec(number(), 300..320).prop_map(|n| format!("[{}]", n.join(","))),
        prop::sample::select(vec!["", "{", "[1,", "null", "\"3\"", "{\"n\":1}", "[[1]]", "nan", "[1,2]x"])
            .prop_map(str::to_owned),
        "\\PC{0,30}",
    ]
}

/// An expiry: any, or near the clock.
fn expiry(now: i64) -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        (-100_000i64..100_000).prop_map(move |d| now.saturating_add(d)),
        Just(i64::MAX),
        Just(i64::MIN)
    ]
}

proptest! {
    #[test]
    fn any_row_decodes_and_counts_without_a_panic(
        (now, expires_at) in (0..=MAX_NOW).prop_flat_map(|now| (Just(now), expiry(now))),
        value in value(),
        generation in any::<i64>(),
        same_generation in any::<bool>(),
    ) {
        let store_generation = if same_generation { generation } else { generation.wrapping_add(1) };
        stored_row::check(&stored_row::Input { generation, value: &value, expires_at, now, store_generation });
    }
}

/// What the fuzz target found, kept as inputs (`tests/fuzz_regressions/`).
#[test]
fn what_the_fuzzer_found_stays_fixed() {
    // A sliding window of 256 whose stored offsets were huge wrote a value of
    // 4452 bytes, over the store's 4096: the key failed every count. Times
    // more than a window ahead now count as a window ahead; windows over 100
    // years are refused.
    let crash = include_bytes!("../fuzz_regressions/stored_row-sliding-value-too-large");
    stored_row::check(&stored_row::Input::from_bytes(crash).expect("a stored_row input"));
    // The window it was found on (i64::MAX ms) is refused now; the times that
    // are a window ahead are `sliding_value_fits_the_store_whatever_times_it_read`.
    let forever =
        Limit::new("forever").part(Part::new("key", Algorithm::sliding_window(256, Duration::from_millis(u64::MAX))));
    let built = Limits::builder().store(Arc::new(MemoryStore::new())).without_presets().limit(forever).build();
    assert!(built.is_err_and(|e| e.to_string().contains("100 years")));
}
