//! The linearizability checker on histories written by hand: it accepts the
//! orders the contract allows (overlapping calls in either order, expiry on
//! the update's clock) and rejects stale reads, lost updates, torn multi-key
//! updates and answers that break real-time order.

use super::check::check;
use super::history::{Call, Operation};
use crate::{Entry, Write};
use serde_json::json;

fn entry(n: u64) -> Option<Entry> {
    Some(Entry { value: json!(n), expires_at: 1_000_000 })
}

fn put(n: u64) -> Write {
    Write::Put(entry(n).unwrap())
}

/// An update of `keys` from `seen` to `wrote`, invoked and answered at the times given.
fn update(keys: &[&str], seen: Vec<Option<Entry>>, wrote: Vec<Write>, invoked: u64, returned: u64) -> Operation {
    let keys = keys.iter().map(|k| (*k).to_owned()).collect();
    Operation { keys, call: Call::Update { seen, wrote, now: 1_000 }, invoked, returned }
}

fn read(keys: &[&str], got: Vec<Option<Entry>>, invoked: u64, returned: u64) -> Operation {
    let keys = keys.iter().map(|k| (*k).to_owned()).collect();
    Operation { keys, call: Call::Read { got }, invoked, returned }
}

#[test]
fn sequential_counting_is_linearizable() {
    let history = [
        update(&["a"], vec![None], vec![put(1)], 0, 10),
        update(&["a"], vec![entry(1)], vec![put(2)], 20, 30),
        read(&["a"], vec![entry(2)], 40, 50),
    ];
    assert_eq!(check(&history), Ok(()));
}

#[test]
fn overlapping_calls_may_take_effect_in_either_order() {
    // The second update was invoked first, but both overlap: it may go last.
    let history = [
        update(&["a"], vec![entry(1)], vec![put(2)], 0, 100),
        update(&["a"], vec![None], vec![put(1)], 10, 50),
        read(&["a"], vec![entry(2)], 120, 130),
    ];
    assert_eq!(check(&history), Ok(()));
}

#[test]
fn a_lost_update_is_caught() {
    let history = [update(&["a"], vec![None], vec![put(1)], 0, 100), update(&["a"], vec![None], vec![put(1)], 10, 90)];
    let violation = check(&history).unwrap_err();
    assert_eq!(violation.keys, ["a"]);
    assert_eq!(violation.longest_prefix, 1);
}

#[test]
fn a_stale_read_after_the_update_returned_is_caught() {
    let history = [update(&["a"], vec![None], vec![put(1)], 0, 10), read(&["a"], vec![None], 20, 30)];
    assert!(check(&history).is_err());
}

#[test]
fn a_read_overlapping_the_update_may_see_either() {
    let history = [update(&["a"], vec![None], vec![put(1)], 0, 100), read(&["a"], vec![None], 20, 30)];
    assert_eq!(check(&history), Ok(()));
}

#[test]
fn a_torn_multi_key_update_is_caught() {
    let history = [
        update(&["a", "b"], vec![None, None], vec![put(1), put(1)], 0, 100),
        read(&["b", "a"], vec![None, entry(1)], 20, 30),
        read(&["a", "b"], vec![entry(1), entry(1)], 40, 50),
    ];
    assert!(check(&history).is_err());
}

#[test]
fn keys_apart_are_checked_apart_and_a_fault_names_its_keys() {
    let mut history = vec![update(&["x"], vec![None], vec![put(7)], 0, 10)];
    for i in 0..50 {
        let key = format!("k{i}");
        history.push(update(&[&key], vec![None], vec![put(1)], 0, 10));
    }
    history.push(read(&["x"], vec![entry(8)], 20, 30));
    assert_eq!(check(&history).unwrap_err().keys, ["x"]);
}

#[test]
fn an_update_sees_an_entry_expired_on_its_clock_as_absent() {
    let short = Entry { value: json!(1), expires_at: 1_500 };
    let mut later = update(&["a"], vec![None], vec![Write::Keep], 20, 30);
    if let Call::Update { now, .. } = &mut later.call {
        *now = 2_000;
    }
    let history = [update(&["a"], vec![None], vec![Write::Put(short)], 0, 10), later.clone()];
    assert_eq!(check(&history), Ok(()));
    // At 1_000 the entry is live: seeing nothing then is stale.
    let early = update(&["a"], vec![None], vec![Write::Keep], 20, 30);
    let history =
        [update(&["a"], vec![None], vec![Write::Put(Entry { value: json!(1), expires_at: 1_500 })], 0, 10), early];
    assert!(check(&history).is_err());
}

#[test]
fn keep_and_delete_are_modelled() {
    let history = [
        update(&["a", "b"], vec![None, None], vec![put(1), put(2)], 0, 10),
        update(&["a", "b"], vec![entry(1), entry(2)], vec![Write::Keep, Write::Delete], 20, 30),
        read(&["a", "b"], vec![entry(1), None], 40, 50),
    ];
    assert_eq!(check(&history), Ok(()));
}
