//! The rules of the contract as checks, so that every store — ours and an app's
//! own — enforces them the same way and answers with the same errors.
//!
//! A store calls [`check_keys`] before it touches anything and [`run_apply`]
//! in place of calling `apply` itself; then it writes what `run_apply` returned.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::RefusedInput;
use crate::{Apply, Entry, Millis, StoreError, Write};

pub use crate::call_sizes::{MAX_KEYS, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Refuses a key list that breaks the contract: 1 to 32 keys, each 1 to 1024
/// bytes, no key twice.
pub fn check_keys(keys: &[&str]) -> Result<(), StoreError> {
    if keys.is_empty() {
        return Err(RefusedInput::NoKeys.into());
    }
    if keys.len() > MAX_KEYS {
        return Err(RefusedInput::TooManyKeys { count: keys.len() }.into());
    }
    for (index, key) in keys.iter().enumerate() {
        if key.is_empty() {
            return Err(RefusedInput::EmptyKey { index }.into());
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(RefusedInput::KeyTooLong { index, len: key.len() }.into());
        }
        // At most 32 keys: a quadratic scan beats hashing here.
        if let Some(first) = keys[..index].iter().position(|k| k == key) {
            return Err(RefusedInput::DuplicateKey { index, first }.into());
        }
    }
    Ok(())
}

/// The size of `value` serialized as JSON, without allocating.
pub(crate) fn value_size(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value into a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A bound on `value`'s serialized size, found without formatting a number
/// or copying a string: a number takes at most 24 bytes, a string at most six
/// per byte (`\u00XX`) and its quotes.
fn size_at_most(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    let text = |s: &str| s.len().saturating_mul(6).saturating_add(2);
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => 24,
        Value::String(s) => text(s),
        Value::Array(items) => items.iter().fold(2, |n, v| n.saturating_add(size_at_most(v)).saturating_add(1)),
        Value::Object(map) => {
            map.iter().fold(2, |n, (k, v)| n.saturating_add(text(k)).saturating_add(size_at_most(v)).saturating_add(2))
        }
    }
}

/// Refuses `apply`'s answer unless it has one write per key and every value fits.
pub(crate) fn check_writes(writes: &[Write], keys: usize) -> Result<(), StoreError> {
    if writes.len() != keys {
        return Err(RefusedInput::WrongWriteCount { keys, writes: writes.len() }.into());
    }
    for (index, write) in writes.iter().enumerate() {
        if let Write::Put(entry) = write {
            if size_at_most(&entry.value) <= MAX_VALUE_BYTES {
                continue; // surely fits: no need to serialize it to know
            }
            let size = value_size(&entry.value);
            if size > MAX_VALUE_BYTES {
                return Err(RefusedInput::ValueTooLarge { index, size }.into());
            }
        }
    }
    Ok(())
}

/// Calls `apply` and checks its answer: a panic or a bad answer becomes a
/// refusal, so the store writes nothing and stays usable.
///
/// The returned writes are normalized: a `Put` of an entry already expired at
/// `now` comes back as `Delete`.
pub fn run_apply(apply: &mut Apply<'_>, current: &[Option<Entry>], now: Millis) -> Result<Vec<Write>, StoreError> {
    let mut writes = caught(|| apply(current, now))?;
    check_writes(&writes, current.len())?;
    for write in &mut writes {
        expired_is_delete(write, now);
    }
    Ok(writes)
}

/// What `run` returns, or the refusal of its panic.
fn caught<R>(run: impl FnOnce() -> R) -> Result<R, StoreError> {
    catch_unwind(AssertUnwindSafe(run))
        .map_err(|panic| RefusedInput::ApplyPanicked { message: panic_message(panic.as_ref()) }.into())
}

/// A `Put` of an entry already expired at `now` is a `Delete`.
fn expired_is_delete(write: &mut Write, now: Millis) {
    if matches!(write, Write::Put(entry) if entry.expires_at <= now) {
        *write = Write::Delete;
    }
}

/// True when `entry` is live at `now` on the store's clock.
#[cfg(feature = "redis")]
pub(crate) fn is_live(entry: &Entry, now: Millis) -> bool {
    entry.expires_at > now
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "no message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_at_the_edges() {
        let long = "k".repeat(MAX_KEY_BYTES);
        assert!(check_keys(&[long.as_str()]).is_ok());
        let longer = "k".repeat(MAX_KEY_BYTES + 1);
        assert_eq!(
            check_keys(&[longer.as_str()]).unwrap_err().refusal(),
            Some(&RefusedInput::KeyTooLong { index: 0, len: MAX_KEY_BYTES + 1 })
        );
        let many: Vec<String> = (0..=MAX_KEYS).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(check_keys(&refs[..MAX_KEYS]).is_ok());
        assert!(matches!(check_keys(&refs).unwrap_err().refusal(), Some(RefusedInput::TooManyKeys { count: 33 })));
        assert!(matches!(check_keys(&[]).unwrap_err().refusal(), Some(RefusedInput::NoKeys)));
        assert!(matches!(check_keys(&["a", ""]).unwrap_err().refusal(), Some(RefusedInput::EmptyKey { index: 1 })));
        assert!(matches!(
            check_keys(&["a", "b", "a"]).unwrap_err().refusal(),
            Some(RefusedInput::DuplicateKey { index: 2, first: 0 })
        ));
    }

    #[test]
    fn value_size_matches_serde() {
        let v = json!({"n": 12, "s": "é\"\n", "a": [1.5, null, true]});
        assert_eq!(value_size(&v), serde_json::to_vec(&v).unwrap().len());
    }

    #[test]
    fn the_quick_bound_is_never_below_the_size() {
        let values = [
            json!(null),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(-1.797_693_134_862_315_7e308),
            json!(f64::MIN_POSITIVE),
            json!("\u{1}\u{1f}\"\\"),
            json!({"\u{1}": [[], {}, "\n"], "n": -5}),
            json!([[[[1]]], {"a": {"b": {"c": "é"}}}]),
        ];
        for v in values {
            assert!(size_at_most(&v) >= value_size(&v), "{v}");
        }
    }

    #[test]
    fn writes_are_checked_and_normalized() {
        let big = json!("x".repeat(MAX_VALUE_BYTES - 2)); // quotes make it 4096
        assert_eq!(value_size(&big), MAX_VALUE_BYTES);
        let put = |value, expires_at| Write::Put(Entry { value, expires_at });
        assert!(check_writes(&[put(big.clone(), 1)], 1).is_ok());
        let bigger = json!("x".repeat(MAX_VALUE_BYTES - 1));
        assert!(matches!(
            check_writes(&[Write::Keep, put(bigger, 1)], 2).unwrap_err().refusal(),
            Some(RefusedInput::ValueTooLarge { index: 1, size: 4097 })
        ));
        assert!(matches!(
            check_writes(&[], 1).unwrap_err().refusal(),
            Some(RefusedInput::WrongWriteCount { keys: 1, writes: 0 })
        ));
        let mut apply = |_: &[Option<Entry>], now: Millis| vec![put(json!(1), now), put(json!(2), now + 1)];
        let writes = run_apply(&mut apply, &[None, None], 10).unwrap();
        assert_eq!(writes, vec![Write::Delete, put(json!(2), 11)]);
    }

    #[test]
    fn a_panicking_apply_is_a_refusal() {
        let mut apply = |_: &[Option<Entry>], _: Millis| -> Vec<Write> { panic!("boom") };
        let err = run_apply(&mut apply, &[None], 0).unwrap_err();
        assert_eq!(err.refusal(), Some(&RefusedInput::ApplyPanicked { message: "boom".into() }));
    }
}
