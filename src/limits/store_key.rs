//! Store keys of limits: `{limit}:{part}:{value}`, or, when that would pass the
//! store's 1024-byte key limit, `{limit}:{part}#{sha256 of value, hex}`. Names
//! never hold `:` or `#`, so the two forms can't meet. [`key_of`] says which
//! a value takes and what follows the stem: every path that names a limit's
//! key (a call's keys here, the integer count's prefix and rest, an
//! override's value read back) goes through it, so the key of a value is the
//! same text whichever path counts it.
//!
//! A call's keys are built on the stack when they are short (almost every
//! key: a limit, a part and an email or an IP), so counting allocates nothing
//! for them.

use std::fmt::Write as _;

use arrayvec::ArrayString;
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use crate::MAX_KEY_BYTES;

/// A limit part's stem, `{limit}:{part}`: what all its keys start with.
pub(crate) fn stem(limit: &str, part: &str) -> String {
    format!("{limit}:{part}")
}

/// What a key puts between its stem and a value that fits.
const BEFORE_VALUE: &str = ":";

/// What every key of `stem` whose value fits starts with: `{stem}:`, the
/// prefix of the part's [integer counter](crate::IntegerCounts).
pub(crate) fn prefix(stem: &str) -> String {
    [stem, BEFORE_VALUE].concat()
}

/// The key of `value` on the part whose stem is `stem`, after the stem: the
/// one place a key's text is decided.
pub(crate) fn key_of<'v>(stem: &str, value: &'v str) -> KeyOf<'v> {
    if stem.len() + BEFORE_VALUE.len() + value.len() <= MAX_KEY_BYTES {
        return KeyOf::Plain(value);
    }
    let mut hashed = ArrayString::new();
    hashed.push('#');
    for byte in Sha256::digest(value.as_bytes()) {
        let _ = write!(hashed, "{byte:02x}");
    }
    KeyOf::Hashed(hashed)
}

/// The value of `key`, a key of the part whose stem is `stem`, when it fits
/// (a long value's key names only its hash): [`key_of`] read back.
pub(crate) fn plain_value<'k>(stem: &str, key: &'k str) -> Option<&'k str> {
    key.strip_prefix(stem)?.strip_prefix(BEFORE_VALUE)
}

/// A value's key after its part's stem: see [`key_of`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum KeyOf<'v> {
    /// The key is the stem's [`prefix`] followed by the value itself.
    Plain(&'v str),
    /// The key is the stem followed by this: `#` and the value's SHA-256, in hex.
    Hashed(ArrayString<65>),
}

impl KeyOf<'_> {
    /// The key's text after the stem, in two pieces: a key is its stem
    /// and these, back to back.
    pub(crate) fn after_stem(&self) -> [&str; 2] {
        match self {
            KeyOf::Plain(value) => [BEFORE_VALUE, value],
            KeyOf::Hashed(hashed) => [hashed, ""],
        }
    }
}

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
        let key = key_of(stem, value);
        let [mark, rest] = key.after_stem();
        match &mut self.text {
            // The usual key: one check that it fits, then three copies.
            Text::Inline(inline) if inline.remaining_capacity() >= stem.len() + mark.len() + rest.len() => {
                inline.push_str(stem);
                inline.push_str(mark);
                inline.push_str(rest);
            }
            _ => {
                self.push_str(stem);
                self.push_str(mark);
                self.push_str(rest);
            }
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

    /// The key, when there is exactly one.
    pub(crate) fn only(&self) -> Option<&str> {
        match self.ends.as_slice() {
            [(_, end)] => Some(&self.as_str()[..*end]),
            _ => None,
        }
    }

    /// How many keys were added.
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
    use std::sync::Arc;

    use super::*;
    use crate::limits::normalize::{KeyRules, Normalize};
    use crate::limits::{Algorithm, Limit, Part};
    use crate::{
        Apply, Entry, GcraCounted, GcraStep, IntegerCounter, IntegerCounts, LimitStore, Limits, MemoryStore, StoreError,
    };

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

    /// What a store was asked: the text of each key, by `update_now` (the
    /// general path) or by its integer counts (prefix and rest).
    type Noted = Arc<parking_lot::Mutex<Vec<String>>>;

    /// A store of the site's own, in memory, that notes each key it is
    /// asked about; it offers integer counts when `integers`, and answers
    /// through futures only (its integer counts too) when `later`.
    struct Noting {
        memory: MemoryStore,
        integers: bool,
        later: bool,
        noted: Noted,
    }

    #[async_trait::async_trait]
    impl LimitStore for Noting {
        fn shared(&self) -> bool {
            false
        }
        fn answers_at_once(&self) -> bool {
            !self.later
        }
        fn update_now(&self, keys: &[&str], apply: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
            self.noted.lock().extend(keys.iter().map(|k| (*k).to_owned()));
            self.memory.update_now(keys, apply).filter(|_| !self.later)
        }
        async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
            // Through futures with integer counts, which path counted is noted too.
            let by = if self.later && self.integers { " by update" } else { "" };
            self.noted.lock().extend(keys.iter().map(|k| format!("{k}{by}")));
            self.memory.update(keys, apply).await
        }
        async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
            self.memory.read(keys).await
        }
        async fn sweep(&self) -> Result<u64, StoreError> {
            self.memory.sweep().await
        }
        fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
            self.integers.then_some(self as &dyn IntegerCounts)
        }
    }

    impl IntegerCounts for Noting {
        fn counter(&self, prefix: &str) -> Option<Box<dyn IntegerCounter>> {
            let inner = self.memory.counter(prefix).filter(|_| !self.later)?;
            Some(Box::new(NotingCounter { prefix: prefix.to_owned(), inner, noted: self.noted.clone() }))
        }
        fn async_counter(&self, prefix: &str) -> Option<Box<dyn crate::AsyncIntegerCounter>> {
            let inner = self.memory.counter(prefix).filter(|_| self.later)?;
            Some(Box::new(NotingCounter { prefix: prefix.to_owned(), inner, noted: self.noted.clone() }))
        }
    }

    struct NotingCounter {
        prefix: String,
        inner: Box<dyn IntegerCounter>,
        noted: Noted,
    }

    impl IntegerCounter for NotingCounter {
        fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
            self.noted.lock().push(format!("{}{rest}", self.prefix));
            self.inner.count(rest, step)
        }
    }

    type Counting<'a> =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>>;

    impl crate::AsyncIntegerCounter for NotingCounter {
        fn count<'a>(&'a self, rest: &'a str, step: GcraStep) -> Counting<'a> {
            Box::pin(std::future::ready(IntegerCounter::count(self, rest, step)))
        }
    }

    /// The keys one attempt on `value` asked a store for, through the
    /// integer count when the store offers it and `integers`, else through
    /// `update_now`; and the text of the key `CallKeys` writes for it.
    async fn asked(normalize: Normalize, value: &str, integers: bool) -> (Vec<String>, String) {
        asked_as(normalize, value, integers, false, false).await
    }

    /// [`asked`], the value handed over as an address (it must be one)
    /// through a [`LimitHandle`](crate::limits::LimitHandle) when `as_address`.
    /// Through futures only when `later`.
    async fn asked_as(
        normalize: Normalize,
        value: &str,
        integers: bool,
        as_address: bool,
        later: bool,
    ) -> (Vec<String>, String) {
        let noted = Noted::default();
        let store = Noting { memory: MemoryStore::new(), integers, later, noted: noted.clone() };
        let part = Part::new("who", Algorithm::gcra(5, std::time::Duration::from_secs(60))).normalized(normalize);
        let limits = Limits::builder()
            .store(Arc::new(store))
            .single_instance(true)
            .without_presets()
            .limit(Limit::new("door").part(part))
            .build()
            .unwrap();
        if as_address {
            let ip = value.parse().unwrap();
            limits.handle("door").unwrap().attempt_address_now(ip, 1).unwrap().unwrap();
        } else {
            limits.attempt("door", &[("who", value)]).await.unwrap();
        }
        // An address handed over counts as its client's network's text.
        let rules = KeyRules::default();
        let value = match as_address {
            true => rules.client_network(value.parse().unwrap()).to_string(),
            false => value.to_owned(),
        };
        let mut keys = CallKeys::new();
        keys.push(0, &stem("door", "who"), &rules.apply(normalize, &value).unwrap());
        let written = keys.only().unwrap().to_owned();
        let asked = noted.lock().clone();
        (asked, written)
    }

    /// Every path names the same key, byte for byte, for the same limit,
    /// part and value: the integer count (its prefix and the value; here and
    /// now, or through a future), the
    /// general path (`CallKeys`), a value too long for its key (the hashed
    /// form, on both), and an address given as the address (the layer's)
    /// or as its text, and handed over as the address (as its client's
    /// network's text).
    #[tokio::test]
    async fn every_path_names_the_same_key() {
        let long = "v".repeat(MAX_KEY_BYTES);
        let cases = [
            (Normalize::Exact, "c-1"),
            (Normalize::Folded, " Ada@Example.COM "),
            (Normalize::Ip, "::ffff:192.0.2.7"),
            (Normalize::Ip, "2001:db8:1:2:aaaa::1"),
            (Normalize::Exact, long.as_str()),
        ];
        for (normalize, value) in cases {
            let (by_integers, written) = asked(normalize, value, true).await;
            let (by_update, same) = asked(normalize, value, false).await;
            let (by_integers_later, _) = asked_as(normalize, value, true, false, true).await;
            assert_eq!(written, same);
            assert_eq!(by_integers, std::slice::from_ref(&written), "{normalize:?} {value}");
            // A value too long for its key goes by update, on every store.
            let by = if value.len() > 1000 { " by update" } else { "" };
            assert_eq!(by_integers_later, [format!("{written}{by}")], "{normalize:?} {value}");
            assert_eq!(by_update, std::slice::from_ref(&written), "{normalize:?} {value}");
            assert_eq!(written.starts_with("door:who#"), value.len() > 1000, "{value}");
        }
        // An address handed over as the address (the layer's), on either path.
        for value in ["192.0.2.7", "::ffff:192.0.2.7", "2001:db8:1:2:aaaa::1"] {
            for normalize in [Normalize::Exact, Normalize::Folded, Normalize::Ip] {
                for integers in [true, false] {
                    let (by_address, written) = asked_as(normalize, value, integers, true, false).await;
                    assert_eq!(by_address, [written], "{normalize:?} {value} {integers}");
                }
            }
        }
        let rules = KeyRules::default();
        for text in ["192.0.2.7", "::ffff:192.0.2.7", "2001:db8:1:2:aaaa::1"] {
            let ip: std::net::IpAddr = text.parse().unwrap();
            for normalize in [Normalize::Exact, Normalize::Ip] {
                let of_text = rules.apply(normalize, &ip.to_string()).unwrap().into_owned();
                assert_eq!(rules.address(normalize, ip).as_str(), of_text, "{normalize:?} {ip}");
            }
        }
    }
}
