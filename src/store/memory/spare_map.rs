//! This thread's spare map: one small `{"n": …}`-like map the store is
//! done with (lent to `apply`, or written by it and now held as text), kept
//! so that the next value of the same keys is read into it (`int_text.rs`)
//! instead of into a new map. A count of `{"n": n}` then allocates nothing
//! to lend its value, and frees only what `apply` made.
//!
//! At most one map of at most [`SPARE_KEYS`] keys per thread, its values
//! stale until they are all set again; never seen by anyone but the reader
//! that fills it.

use std::cell::Cell;

use serde_json::{Map, Value};

/// The most keys a spare object may hold.
const SPARE_KEYS: usize = 4;

thread_local! {
    static SPARE: Cell<Option<Map<String, Value>>> = const { Cell::new(None) };
}

/// Keeps `value`, which the store is done with, as this thread's spare when
/// it is a small object; drops it (or the spare it replaces) otherwise.
pub(super) fn keep(value: Value) {
    if let Value::Object(map) = value {
        if (1..=SPARE_KEYS).contains(&map.len()) {
            put(map);
        }
    }
}

/// The spare, taken (none is kept until one is put back).
pub(super) fn take() -> Option<Map<String, Value>> {
    SPARE.try_with(Cell::take).ok().flatten()
}

/// Keeps `map` as the spare, dropping the one it replaces.
pub(super) fn put(map: Map<String, Value>) {
    // On a thread that is ending, the map is simply dropped.
    let _ = SPARE.try_with(|spare| spare.replace(Some(map)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Only a small object is kept, one at a time, and taken once.
    #[test]
    fn one_small_object_is_kept_and_taken_once() {
        std::thread::spawn(|| {
            for value in [json!(3), json!([1, 2]), json!({}), json!({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})] {
                keep(value);
                assert_eq!(take(), None);
            }
            keep(json!({"a": 1}));
            keep(json!({"b": 2}));
            assert_eq!(take().map(Value::Object), Some(json!({"b": 2})), "the later one replaces the spare");
            assert_eq!(take(), None);
        })
        .join()
        .unwrap();
    }
}
