//! Store keys of limits: `{limit}:{part}:{value}`, or, when that would pass the
//! store's 1024-byte key limit, `{limit}:{part}#{sha256 of value, hex}`. Names
//! never hold `:` or `#`, so the two forms can't meet.
//!
//! A call's keys are built on the stack when they are short (almost every
//! key: a limit, a part and an email or an IP), so counting allocates nothing
//! for them.

use std::fmt::Write as _;

use arrayvec::ArrayString;
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use crate::MAX_KEY_BYTES;

/// Bytes of a call's keys held on the stack; longer go on the heap.
const INLINE: usize = 192;

/// The store keys of one call, back to back in one buffer (on the stack when
/// short), each with the index of its part in the limit.
#[derive(Debug)]
pub(crate) struct CallKeys {
    text: Text,
    /// Per key: its part's index, and where its text ends.
    ends: SmallVec<[(usize, usize); 4]>,
}

#[derive(Debug)]
enum Text {
    Inline(ArrayString<INLINE>),
    Heap(String),
}

impl CallKeys {
    /// No keys yet.
    pub(crate) fn new() -> Self {
        CallKeys { text: Text::Inline(ArrayString::new()), ends: SmallVec::new() }
    }

    /// Adds the key of `value` on the part `stem` (`{limit}:{part}`) names.
    pub(crate) fn push(&mut self, part: usize, stem: &str, value: &str) {
        if stem.len() + 1 + value.len() <= MAX_KEY_BYTES {
            match &mut self.text {
                // The usual key: one check that it fits, then three copies.
                Text::Inline(inline) if inline.remaining_capacity() > stem.len() + value.len() => {
                    inline.push_str(stem);
                    inline.push(':');
                    inline.push_str(value);
                }
                _ => {
                    self.push_str(stem);
                    self.push_str(":");
                    self.push_str(value);
                }
            }
        } else {
            self.push_str(stem);
            self.push_str("#");
            let mut hex = ArrayString::<64>::new();
            for byte in Sha256::digest(value.as_bytes()) {
                let _ = write!(hex, "{byte:02x}");
            }
            self.push_str(&hex);
        }
        let end = self.as_str().len();
        self.ends.push((part, end));
    }

    fn push_str(&mut self, piece: &str) {
        if let Text::Inline(inline) = &mut self.text {
            if inline.try_push_str(piece).is_ok() {
                return;
            }
            let mut heap = String::with_capacity(inline.len() + piece.len() + MAX_KEY_BYTES);
            heap.push_str(inline);
            self.text = Text::Heap(heap);
        }
        if let Text::Heap(heap) = &mut self.text {
            heap.push_str(piece);
        }
    }

    fn as_str(&self) -> &str {
        match &self.text {
            Text::Inline(text) => text,
            Text::Heap(text) => text,
        }
    }

    /// Each key with its part's index, in the order they were added.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &str)> {
        let text = self.as_str();
        let mut start = 0;
        self.ends.iter().map(move |&(part, end)| {
            let key = &text[start..end];
            start = end;
            (part, key)
        })
    }

    /// The keys alone, as a store takes them.
    pub(crate) fn refs(&self) -> SmallVec<[&str; 4]> {
        self.iter().map(|(_, key)| key).collect()
    }

    /// How many keys were added.
    /// The key, when there is exactly one.
    pub(crate) fn only(&self) -> Option<&str> {
        match self.ends.as_slice() {
            [(_, end)] => Some(&self.as_str()[..*end]),
            _ => None,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when no key was added.
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(limit: &str, part: &str, value: &str) -> String {
        let mut keys = CallKeys::new();
        keys.push(0, &format!("{limit}:{part}"), value);
        let first = keys.iter().next().map(|(_, k)| k.to_owned()).unwrap_or_default();
        assert_eq!(keys.only(), Some(first.as_str()));
        first
    }

    #[test]
    fn long_values_are_hashed_to_fit() {
        assert_eq!(key("sign-in", "ip", "192.0.2.1"), "sign-in:ip:192.0.2.1");
        let fits = "a".repeat(MAX_KEY_BYTES - "sign-in:ip:".len());
        assert_eq!(key("sign-in", "ip", &fits).len(), MAX_KEY_BYTES);
        let long = format!("{fits}a");
        let hashed = key("sign-in", "ip", &long);
        assert!(hashed.starts_with("sign-in:ip#"));
        assert_eq!(hashed.len(), "sign-in:ip#".len() + 64);
        assert_ne!(hashed, key("sign-in", "ip", &format!("{fits}b")));
    }

    #[test]
    fn keys_past_the_stack_buffer_read_the_same() {
        let mut keys = CallKeys::new();
        let values = ["a@example.com".to_owned(), "v".repeat(INLINE), "192.0.2.1".to_owned()];
        for (i, value) in values.iter().enumerate() {
            keys.push(i, "sign-in:part", value);
        }
        assert!(matches!(keys.text, Text::Heap(_)), "the second key spills to the heap");
        let read: Vec<(usize, String)> = keys.iter().map(|(i, k)| (i, k.to_owned())).collect();
        let expected: Vec<(usize, String)> =
            values.iter().enumerate().map(|(i, v)| (i, format!("sign-in:part:{v}"))).collect();
        assert_eq!(read, expected);
        assert_eq!(keys.refs().len(), 3);
        assert_eq!(keys.only(), None);
    }
}
