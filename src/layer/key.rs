//! `Key`: the value a request is counted by, held inline when it is short
//! (an address), so that counting a request by its address needs no heap.

use std::fmt;

use arrayvec::ArrayString;

/// The value a request is counted by, as a [`KeyExtractor`](super::KeyExtractor)
/// finds it: inline up to 48 bytes (any address's text), else on the heap.
#[derive(Clone, PartialEq, Eq)]
pub struct Key(Repr);

#[derive(Clone, PartialEq, Eq)]
enum Repr {
    Inline(ArrayString<48>),
    Heap(String),
}

impl Key {
    /// `text` as a key, inline when it fits.
    pub fn new(text: &str) -> Self {
        ArrayString::from(text).map_or_else(|_| Key(Repr::Heap(text.to_owned())), |s| Key(Repr::Inline(s)))
    }

    /// The key written by `write` (as `Display` writes), inline when it fits.
    pub fn write(write: impl Fn(&mut dyn fmt::Write) -> fmt::Result) -> Self {
        let mut inline = ArrayString::<48>::new();
        if write(&mut inline).is_ok() {
            return Key(Repr::Inline(inline));
        }
        let mut heap = String::new();
        let _ = write(&mut heap);
        Key(Repr::Heap(heap))
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(s) => s,
            Repr::Heap(s) => s,
        }
    }
}

impl From<String> for Key {
    fn from(text: String) -> Self {
        Key(Repr::Heap(text))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}
