//! The compact JSON text of an object or array of integers, such as
//! `{"n":3}` or a sliding window's `[1733300000000,0]`: the values a limit
//! keeps most, written and read back without serde's machinery.
//!
//! Byte for byte what `serde_json` writes, and read back to the `Value` it
//! would parse, so text written either way reads either way. Anything else
//! (a key that needs escaping, a string, a float, an integer beyond `i64`)
//! is left to `serde_json`: [`write`] and [`read`] answer `None` for it.
//!
//! An object is read into this thread's spare (`spare_map.rs`) when it holds the
//! same keys.

use serde_json::{Map, Value};

use super::spare_map;

/// Writes `value`'s compact text into `out` when `value` is an object or
/// array whose members are all integers that fit an `i64`, and the text fits;
/// the text's length, or `None` (with `out` in any state) when it does not.
pub(super) fn write(value: &Value, out: &mut [u8]) -> Option<usize> {
    let mut w = Cursor { out, len: 0 };
    match value {
        Value::Object(map) => {
            w.put(b"{")?;
            for (i, (key, value)) in map.iter().enumerate() {
                if i > 0 {
                    w.put(b",")?;
                }
                // serde_json escapes these; such a key is left to it.
                if key.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
                    return None;
                }
                w.put(b"\"")?;
                w.put(key.as_bytes())?;
                w.put(b"\":")?;
                w.int(value.as_i64()?)?;
            }
            w.put(b"}")?;
        }
        Value::Array(items) => {
            w.put(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    w.put(b",")?;
                }
                w.int(item.as_i64()?)?;
            }
            w.put(b"]")?;
        }
        _ => return None,
    }
    Some(w.len)
}

/// The value of `text` when it is the text of an object or array of
/// integers that fit an `i64`, with keys that hold no escape; `None` for
/// any other text.
pub(super) fn read(text: &[u8]) -> Option<Value> {
    let mut r = Reader { text, at: 0 };
    let value = match r.next()? {
        b'{' => {
            if let Some(map) = r.fill_spare() {
                return Some(Value::Object(map));
            }
            let mut map = Map::new();
            if r.peek() == Some(b'}') {
                r.at += 1;
            } else {
                loop {
                    let key = r.key()?;
                    let n = r.int()?;
                    map.insert(key.to_owned(), Value::from(n));
                    match r.next()? {
                        b',' => {}
                        b'}' => break,
                        _ => return None,
                    }
                }
            }
            Value::Object(map)
        }
        b'[' => {
            let mut items = Vec::new();
            if r.peek() == Some(b']') {
                r.at += 1;
            } else {
                loop {
                    items.push(Value::from(r.int()?));
                    match r.next()? {
                        b',' => {}
                        b']' => break,
                        _ => return None,
                    }
                }
            }
            Value::Array(items)
        }
        _ => return None,
    };
    (r.at == text.len()).then_some(value)
}

/// Writes into a fixed buffer, failing when it would overflow.
struct Cursor<'a> {
    out: &'a mut [u8],
    len: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) -> Option<()> {
        let end = self.len + bytes.len();
        self.out.get_mut(self.len..end)?.copy_from_slice(bytes);
        self.len = end;
        Some(())
    }

    fn int(&mut self, n: i64) -> Option<()> {
        self.put(itoa::Buffer::new().format(n).as_bytes())
    }
}

/// Reads text this module (or serde_json) wrote.
#[derive(Clone)]
struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.at += 1;
        Some(byte)
    }

    /// The rest of an object's text read into this thread's spare, when it
    /// holds the same keys in the same order; every value is then the text's.
    /// `None` (the spare kept, the text unread) otherwise.
    fn fill_spare(&mut self) -> Option<Map<String, Value>> {
        let mut map = spare_map::take()?;
        let mut r = self.clone();
        if r.fill(&mut map).is_some() && r.at == r.text.len() {
            *self = r;
            return Some(map);
        }
        // Its values may have changed; the next fill sets them all.
        spare_map::put(map);
        None
    }

    /// Sets every value of `map` from the text, whose keys must be `map`'s.
    fn fill(&mut self, map: &mut Map<String, Value>) -> Option<()> {
        let last = map.len().checked_sub(1)?;
        for (i, (key, value)) in map.iter_mut().enumerate() {
            if self.key_text()? != key.as_bytes() {
                return None;
            }
            *value = Value::from(self.int()?);
            let end = if i < last { b',' } else { b'}' };
            if self.next()? != end {
                return None;
            }
        }
        Some(())
    }

    /// `"key":`, with no escape inside the quotes.
    fn key(&mut self) -> Option<&'a str> {
        std::str::from_utf8(self.key_text()?).ok()
    }

    /// The bytes of `"key":` between its quotes, which hold no escape.
    fn key_text(&mut self) -> Option<&'a [u8]> {
        let text = self.text;
        if self.next()? != b'"' {
            return None;
        }
        let start = self.at;
        let len = text.get(start..)?.iter().position(|&b| b == b'"' || b == b'\\')?;
        let end = start + len;
        self.at = end;
        if self.next()? != b'"' || self.next()? != b':' {
            return None;
        }
        Some(&text[start..end])
    }

    /// An integer as serde_json writes one: an optional `-`, then digits
    /// with no leading zero, within `i64`.
    fn int(&mut self) -> Option<i64> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.at += 1;
        }
        let start = self.at;
        let mut magnitude: u64 = 0;
        while let Some(digit @ b'0'..=b'9') = self.peek() {
            magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.text[start] == b'0') {
            return None;
        }
        if negative {
            // serde_json reads `-0` as a float.
            (magnitude > 0).then(|| 0_i64.checked_sub_unsigned(magnitude)).flatten()
        } else {
            i64::try_from(magnitude).ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn written(value: &Value) -> Option<Vec<u8>> {
        let mut out = [0; 64];
        write(value, &mut out).map(|len| out[..len].to_vec())
    }

    #[test]
    fn the_values_a_limit_keeps_take_the_short_way() {
        for value in [
            json!({"n": 3}),
            json!({"n": -3, "b": i64::MIN, "é": i64::MAX}),
            json!([1_733_300_000_000_i64, 0]),
            json!({}),
            json!([]),
        ] {
            let text = written(&value).expect("an object or array of integers");
            assert_eq!(text, serde_json::to_vec(&value).unwrap());
            assert_eq!(read(&text), Some(value));
        }
    }

    #[test]
    fn anything_else_is_left_to_serde_json() {
        for value in [
            json!({"n": 0.5}),
            json!({"n": u64::MAX}),
            json!({"a\"b": 1}),
            json!({"n": "3"}),
            json!([[1]]),
            json!(3),
            json!({"long": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22]}),
        ] {
            assert_eq!(written(&value), None, "{value}");
        }
        for text in [
            &b"{\"a\\\"b\":1}"[..],
            b"{\"n\":18446744073709551615}",
            b"{\"n\":\"3\"}",
            b"[1]x",
            b"[01]",
            b"[-]",
            b"[-0]",
            b"{\"n\" :1}",
        ] {
            assert_eq!(read(text), None, "{}", String::from_utf8_lossy(text));
        }
    }

    /// A spare object is filled only by text of its very keys, and then
    /// holds that text's values; any other text is read anew.
    #[test]
    fn a_spare_is_filled_only_by_its_own_keys() {
        // Each test runs on a thread of its own, with its own spare.
        std::thread::spawn(|| {
            let texts: [&[u8]; 6] = [
                b"{\"a\":1,\"b\":2}",
                b"{\"a\":3}",
                b"{\"a\":4,\"b\":5,\"c\":6}",
                b"{\"a\":7,\"c\":8}",
                b"{\"b\":9,\"a\":1}",
                b"{}",
            ];
            for first in texts {
                for second in texts {
                    spare_map::keep(read(first).unwrap());
                    let value = read(second).unwrap();
                    assert_eq!(value, serde_json::from_slice::<Value>(second).unwrap());
                    spare_map::keep(value);
                }
            }
            spare_map::keep(json!({"a": "text", "b": [1]}));
            assert_eq!(read(b"{\"a\":1,\"b\":2}"), Some(json!({"a": 1, "b": 2})));
        })
        .join()
        .unwrap();
    }

    proptest::proptest! {
        /// What `write` writes is serde_json's text, and `read` gives back
        /// the value, for any object or array of integers.
        #[test]
        fn written_as_serde_json_writes_and_read_back(
            map in proptest::collection::btree_map(proptest::prelude::any::<String>(), proptest::prelude::any::<i64>(), 0..4),
            items in proptest::collection::vec(proptest::prelude::any::<i64>(), 0..4),
        ) {
            let object = Value::Object(map.into_iter().map(|(k, v)| (k, Value::from(v))).collect());
            for value in [object, Value::from(items)] {
                let theirs = serde_json::to_vec(&value).unwrap();
                if let Some(ours) = written(&value) {
                    proptest::prop_assert_eq!(&ours, &theirs);
                }
                // serde_json's text reads back to the value whenever read takes it.
                if let Some(read) = read(&theirs) {
                    proptest::prop_assert_eq!(read, value);
                } else {
                    proptest::prop_assert!(written(&value).is_none());
                }
            }
        }

        /// Any text `read` takes is text serde_json parses to the same value:
        /// serde_json's own texts of integers, with one byte changed or not.
        #[test]
        fn read_agrees_with_serde_json(
            map in proptest::collection::btree_map("[a-z\"\\\\é]{0,3}", proptest::prelude::any::<i64>(), 0..3),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            byte in proptest::sample::select(b"{}[]\",:-0123456789a\\ ".to_vec()),
            change in proptest::prelude::any::<bool>(),
        ) {
            let object = Value::Object(map.into_iter().map(|(k, v)| (k, Value::from(v))).collect());
            let mut text = serde_json::to_vec(&object).unwrap();
            if change {
                let i = at.index(text.len());
                text[i] = byte;
            }
            if let Some(value) = read(&text) {
                proptest::prop_assert_eq!(Some(value), serde_json::from_slice::<Value>(&text).ok());
            }
        }
    }
}
