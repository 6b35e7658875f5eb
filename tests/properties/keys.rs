//! The key rules: `check_keys` accepts exactly 1 to 32 keys of 1 to 1024 bytes
//! with no key twice, names the first key that breaks them, and a store
//! (the memory store) accepts exactly the key lists `check_keys` accepts.

#![allow(dead_code)] // each user takes what it needs

use limit_store::rules::check_keys;
use limit_store::{Entry, LimitStore, MemoryStore, Write, MAX_KEYS, MAX_KEY_BYTES};

/// The fuzzer's bytes: keys separated by NUL (a key may be empty). A leading
/// byte `n` repeats the last key `n` times more, to reach the limits cheaply.
pub fn from_bytes(data: &[u8]) -> Option<Vec<String>> {
    let (&repeat, rest) = data.split_first()?;
    let text = std::str::from_utf8(rest).ok()?;
    let mut keys: Vec<String> =
        if text.is_empty() { Vec::new() } else { text.split('\0').map(str::to_owned).collect() };
    if let Some(last) = keys.last().cloned() {
        keys.extend((0..repeat % 64).map(|i| format!("{last}{}", "x".repeat(usize::from(i) * 17))));
    }
    Some(keys)
}

/// What `check_keys` should say about `keys`: `None`, or the start of its error.
fn expected(keys: &[&str]) -> Option<String> {
    if keys.is_empty() {
        return Some("no keys given".into());
    }
    if keys.len() > MAX_KEYS {
        return Some(format!("{} keys given", keys.len()));
    }
    for (index, key) in keys.iter().enumerate() {
        if key.is_empty() {
            return Some(format!("key #{index} is empty"));
        }
        if key.len() > MAX_KEY_BYTES {
            return Some(format!("key #{index} is {} bytes", key.len()));
        }
        if let Some(first) = keys[..index].iter().position(|k| k == key) {
            return Some(format!("key #{index} repeats key #{first}"));
        }
    }
    None
}

/// Checks every property on one key list; `runtime` runs the memory store.
pub fn check(keys: &[String], runtime: &tokio::runtime::Runtime, store: &MemoryStore) {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let checked = check_keys(&keys);
    match (&checked, expected(&keys)) {
        (Ok(()), None) => {}
        (Err(e), Some(start)) => {
            assert!(matches!(e, limit_store::StoreError::Refused(_)), "{e}");
            assert!(e.to_string().contains(&start), "{keys:?}: {e} (expected {start:?})");
        }
        (got, want) => panic!("{keys:?}: check_keys answered {got:?}, expected {want:?}"),
    }
    let mut apply = |current: &[Option<Entry>], now| {
        current.iter().map(|_| Write::Put(Entry { value: 1.into(), expires_at: now + 60_000 })).collect()
    };
    let stored = runtime.block_on(LimitStore::update(store, &keys, &mut apply));
    match (stored, checked) {
        (Ok(()), Ok(())) => {
            // Leave nothing behind: the store stays empty however long the run.
            let mut delete = |current: &[Option<Entry>], _| current.iter().map(|_| Write::Delete).collect();
            runtime.block_on(LimitStore::update(store, &keys, &mut delete)).expect("deleted");
        }
        (Err(e), Err(_)) => assert!(matches!(e, limit_store::StoreError::Refused(_)), "{e}"),
        (got, want) => panic!("{keys:?}: the memory store answered {got:?}, check_keys {want:?}"),
    }
}
