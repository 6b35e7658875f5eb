//! Writing, reading, keeping and deleting entries, seen through both handles.

use serde_json::json;

use super::super::support::*;
use super::super::StorePair;
use crate::{Entry, Millis, Write};

const RULE_SEEN: &str = "two handles on one shared store see each other's writes at once";

/// An entry written through one handle is what the other reads and applies on.
pub async fn written_entry_is_seen_by_both_handles(pair: StorePair) -> Outcome {
    let keys = unique_keys(1);
    let key = keys[0].as_str();
    let written = put(&*pair.first, key, json!({"n": 7}), 600_000).await?;
    for (name, handle) in [("first", &pair.first), ("second", &pair.second)] {
        let got = read(&**handle, &[key]).await?;
        ensure(got[0].as_ref() == Some(&written), RULE_SEEN, format!("read through {name}: {written:?}"), || {
            show(&got)
        })?;
        let (seen, _) = seen_by_apply(&**handle, &[key]).await?;
        ensure(
            seen[0].as_ref() == Some(&written),
            RULE_SEEN,
            format!("apply through {name} sees {written:?}"),
            || show(&seen),
        )?;
    }
    Ok(())
}

/// A key never written is `None` to `read` and to `apply`, and stays absent
/// when `apply` keeps it.
pub async fn absent_key_is_none(pair: StorePair) -> Outcome {
    let keys = unique_keys(2);
    let keys = refs(&keys);
    let (seen, _) = seen_by_apply(&*pair.first, &keys).await?;
    ensure(seen == vec![None, None], "a key with no live entry is None to apply", "[None, None]", || show(&seen))?;
    let got = read(&*pair.second, &keys).await?;
    ensure(got == vec![None, None], "a key with no live entry is None to read", "[None, None]", || show(&got))
}

/// `read` answers one slot per key in the order asked, absent keys included.
pub async fn read_answers_in_key_order(pair: StorePair) -> Outcome {
    let keys = unique_keys(4);
    let a = put(&*pair.first, &keys[0], json!("a"), 600_000).await?;
    let c = put(&*pair.second, &keys[2], json!("c"), 600_000).await?;
    let d = put(&*pair.first, &keys[3], json!("d"), 600_000).await?;
    let rule = "read and apply answer one slot per key, in the order of the keys";
    let forward = refs(&keys);
    let want = vec![Some(a.clone()), None, Some(c.clone()), Some(d.clone())];
    let got = read(&*pair.second, &forward).await?;
    ensure(got == want, rule, show(&want), || show(&got))?;
    let backward: Vec<&str> = forward.iter().rev().copied().collect();
    let want_back: Vec<Option<Entry>> = want.iter().rev().cloned().collect();
    let got = read(&*pair.first, &backward).await?;
    ensure(got == want_back, rule, show(&want_back), || show(&got))?;
    let (seen, _) = seen_by_apply(&*pair.second, &backward).await?;
    ensure(seen == want_back, rule, show(&want_back), || show(&seen))
}

/// Any JSON value up to the size limit comes back exactly as written.
pub async fn values_round_trip_exactly(pair: StorePair) -> Outcome {
    let values = [
        json!({"n": 1, "hits": [1_700_000_000_123_i64, 1_700_000_000_456_i64]}),
        json!({"big": 9_007_199_254_740_993_u64, "neg": -42, "f": 1.5, "zero": 0}),
        json!({"s": "é ✓ 🦀 \"quoted\" \\ \n\t", "nested": {"a": [null, true, false, {"b": []}]}}),
        json!("plain string"),
        json!(12),
        json!(null),
        json!([]),
    ];
    let keys = unique_keys(values.len());
    for (key, value) in keys.iter().zip(values.iter()) {
        let written = put(&*pair.first, key, value.clone(), 600_000).await?;
        let got = read(&*pair.second, &[key]).await?;
        ensure(
            got[0].as_ref() == Some(&written),
            "values and expiries round-trip exactly",
            format!("{written:?}"),
            || show(&got),
        )?;
    }
    Ok(())
}

/// `Keep` leaves a live entry's value and expiry as they were, and an absent
/// key absent.
pub async fn keep_leaves_the_entry_as_it_was(pair: StorePair) -> Outcome {
    let keys = unique_keys(2);
    let written = put(&*pair.first, &keys[0], json!({"n": 3}), 600_000).await?;
    let both = refs(&keys);
    seen_by_apply(&*pair.second, &both).await?; // Keep on both keys
    let got = read(&*pair.first, &both).await?;
    let want = vec![Some(written), None];
    ensure(got == want, "Keep leaves the key as it is", show(&want), || show(&got))
}

/// `Delete` removes a live entry at once, for both handles; on an absent key it
/// is harmless.
pub async fn delete_removes_the_entry(pair: StorePair) -> Outcome {
    let keys = unique_keys(2);
    put(&*pair.first, &keys[0], json!({"n": 1}), 600_000).await?;
    let both = refs(&keys);
    answered(
        pair.second.update(&both, &mut |_: &[Option<Entry>], _: Millis| vec![Write::Delete, Write::Delete]).await,
        "an update that deletes",
    )?;
    for handle in [&pair.first, &pair.second] {
        let got = read(&**handle, &both).await?;
        ensure(got == vec![None, None], "Delete removes the key", "[None, None]", || show(&got))?;
    }
    Ok(())
}

/// Sequential updates alternating between the handles each see the last write.
pub async fn each_update_sees_the_last_write_of_either_handle(pair: StorePair) -> Outcome {
    let keys = unique_keys(1);
    let key = [keys[0].as_str()];
    for round in 0..20u64 {
        let handle = if round % 2 == 0 { &pair.first } else { &pair.second };
        let (seen, _) = seen_by_apply(&**handle, &key).await?;
        ensure(count(&seen[0]) == round, RULE_SEEN, format!("count {round} before update {round}"), || show(&seen))?;
        increment(&**handle, &key).await?;
    }
    Ok(())
}
