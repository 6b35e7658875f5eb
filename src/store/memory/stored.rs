//! How the memory store holds a value: compactly, rebuilt as a
//! `serde_json::Value` only when `apply` or a read needs it.
//!
//! An integer is held as an `i64`, which a GCRA reads and writes in place; any
//! other number, a bool or null as the `Value` itself (no heap). A string,
//! an array or an object is held as its compact JSON text: inline in the slot
//! when it is short (`{"n":3}`, a sliding window's `[1733300000000,0]`), on the
//! heap as one `Box<str>` when not. So a small object costs no `BTreeMap` node
//! and no `String` per field while it waits for its next count. An object or
//! array of integers, the usual value, is written and read without serde, and
//! lent into a spare object rather than a new one (`int_text.rs`,
//! `spare_map.rs`). A value holding a float anywhere inside stays a `Value`:
//! serde_json's parser is not bit-exact for every float, and a store must
//! give back what was put.

use serde_json::Value;

use super::{int_text, spare_map};

/// Bytes of JSON text held inline: the slot stays 64 bytes.
const SHORT: usize = 38;

/// One stored value.
#[derive(Debug)]
pub(super) enum Stored {
    /// An integer that fits an `i64`.
    Int(i64),
    /// Null, a bool or another number, or a value holding a float.
    Plain(Value),
    /// Compact JSON text of up to [`SHORT`] bytes.
    Short { len: u8, text: [u8; SHORT] },
    /// Compact JSON text, longer.
    Long(Box<str>),
}

impl Stored {
    /// Holds `value` compactly.
    pub(super) fn new(value: Value) -> Self {
        if let Some(n) = value.as_i64() {
            return Stored::Int(n);
        }
        // The usual object or array, of integers: written without serde.
        let mut text = [0; SHORT];
        if let Some(len) = int_text::write(&value, &mut text) {
            spare_map::keep(value);
            // `len` is at most SHORT (38), so it fits a u8.
            return Stored::Short { len: u8::try_from(len).unwrap_or(u8::MAX), text };
        }
        match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => Stored::Plain(value),
            _ if has_float(&value) => Stored::Plain(value),
            _ => {
                let mut short = Fixed { text: [0; SHORT], len: 0 };
                if serde_json::to_writer(&mut short, &value).is_ok() {
                    // `len` is at most SHORT (38), so it fits a u8.
                    let len = u8::try_from(short.len).unwrap_or(u8::MAX);
                    return Stored::Short { len, text: short.text };
                }
                match serde_json::to_string(&value) {
                    Ok(text) => Stored::Long(text.into_boxed_str()),
                    // Serializing a Value to a String cannot fail; keep it as it is.
                    Err(_) => Stored::Plain(value),
                }
            }
        }
    }

    /// An integer, held as itself.
    pub(super) fn number(n: i64) -> Self {
        Stored::Int(n)
    }

    /// The value, rebuilt.
    pub(super) fn value(&self) -> Value {
        match self {
            Stored::Int(n) => Value::from(*n),
            Stored::Plain(value) => value.clone(),
            Stored::Short { len, text } => parse(&text[..usize::from(*len)]),
            Stored::Long(text) => parse(text.as_bytes()),
        }
    }

    /// The value for `apply`: a plain one is moved out (leaving null, no
    /// clone), an integer is copied and text is parsed, and both stay.
    pub(super) fn lend(&mut self) -> Value {
        match self {
            Stored::Plain(value) => std::mem::take(value),
            _ => self.value(),
        }
    }

    /// Gives back what [`lend`](Self::lend) returned, unchanged.
    pub(super) fn put_back(&mut self, value: Value) {
        match self {
            Stored::Plain(slot) => *slot = value,
            _ => spare_map::keep(value),
        }
    }
}

/// Text this module wrote from a `Value` always parses back to it; the
/// usual object or array of integers without serde.
fn parse(text: &[u8]) -> Value {
    int_text::read(text).unwrap_or_else(|| serde_json::from_slice(text).unwrap_or(Value::Null))
}

fn has_float(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_f64(),
        Value::Array(items) => items.iter().any(has_float),
        Value::Object(map) => map.values().any(has_float),
        _ => false,
    }
}

/// A writer into a fixed buffer that fails when it would overflow.
struct Fixed {
    text: [u8; SHORT],
    len: usize,
}

impl std::io::Write for Fixed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let end = self.len + buf.len();
        let Some(room) = self.text.get_mut(self.len..end) else {
            return Err(std::io::ErrorKind::WriteZero.into());
        };
        room.copy_from_slice(buf);
        self.len = end;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_shape_comes_back_as_it_went_in() {
        let long = json!({"window": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15], "s": "é\"\n"});
        let values = [
            json!(null),
            json!(true),
            json!(7),
            json!(-7),
            json!(u64::MAX),
            json!(0.1),
            json!({"n": 3}),
            json!([1_733_300_000_000_i64, 0]),
            json!("text"),
            json!({"f": [1, 0.30000000000000004]}),
            json!({}),
            json!([]),
            long,
        ];
        for value in values {
            let stored = Stored::new(value.clone());
            assert_eq!(stored.value(), value);
            let mut lent = stored;
            let out = lent.lend();
            assert_eq!(out, value);
            lent.put_back(out);
            assert_eq!(lent.value(), value);
        }
    }

    /// Any JSON value: numbers of every kind, strings with anything in them.
    fn any_value() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            any::<String>().prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Every value is kept as it was given, and lent and put back as it was.
        #[test]
        fn every_value_comes_back(value in any_value()) {
            let mut stored = Stored::new(value.clone());
            proptest::prop_assert_eq!(stored.value(), value.clone());
            let lent = stored.lend();
            proptest::prop_assert_eq!(&lent, &value);
            stored.put_back(lent);
            proptest::prop_assert_eq!(stored.value(), value);
        }
    }

    #[test]
    fn small_objects_stay_inline_and_the_slot_stays_small() {
        assert!(matches!(Stored::new(json!({"n": 3})), Stored::Short { len: 7, .. }));
        assert!(matches!(Stored::new(json!(-7)), Stored::Int(-7)));
        assert!(matches!(Stored::new(json!(u64::MAX)), Stored::Plain(_)));
        assert!(matches!(Stored::new(json!([1_733_300_000_000_i64, 0, 1234, 5678])), Stored::Short { .. }));
        assert!(matches!(Stored::new(json!("x".repeat(SHORT))), Stored::Long(_)));
        assert!(std::mem::size_of::<Stored>() <= 40);
    }
}
