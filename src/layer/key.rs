//! `Key`: the value a request is counted by, held inline when it is short,
//! so that counting a request by its address needs no heap; a client's
//! address is held as the address, and counted so, its text written only
//! when asked for.

use std::fmt::{self, Write as _};
use std::net::IpAddr;
use std::sync::OnceLock;

use arrayvec::ArrayString;

/// The value a request is counted by, as a [`KeyExtractor`](super::KeyExtractor)
/// finds it: inline up to 48 bytes (any address's text fits), else on the heap.
/// Made from a `&str` (inline when it fits) or a `String` (taken as it is).
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Inline(ArrayString<48>),
    Heap(String),
    /// A client address, and its text (as `Display` writes it) once asked for.
    Address(IpAddr, OnceLock<ArrayString<48>>),
}

impl Key {
    /// The client address `ip` (its network, as the extractor counts it):
    /// its text is as `Display` writes it, and a limit counts it as that text.
    pub(crate) fn address(ip: IpAddr) -> Self {
        Key(Repr::Address(ip, OnceLock::new()))
    }

    /// The address, for a key that is one.
    pub(crate) fn ip(&self) -> Option<IpAddr> {
        match &self.0 {
            Repr::Address(ip, _) => Some(*ip),
            _ => None,
        }
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Inline(s) => s,
            Repr::Heap(s) => s,
            Repr::Address(ip, text) => text.get_or_init(|| {
                let mut text = ArrayString::new();
                // Any address's text fits in 48 bytes.
                let _ = write!(text, "{ip}");
                text
            }),
        }
    }
}

/// Keys are equal when their texts are.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

/// `text` as a key, inline when it fits.
impl From<&str> for Key {
    fn from(text: &str) -> Self {
        ArrayString::from(text).map_or_else(|_| Key(Repr::Heap(text.to_owned())), |s| Key(Repr::Inline(s)))
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
