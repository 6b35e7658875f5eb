//! An entry as Redis holds it: one string, `"<expires_at>|<json>"`.
//!
//! The expiry is in the string as well as in the key's `PXAT`, so that the
//! compare-and-set compares value and expiry in one string comparison, and a
//! read judges liveness on the server's clock from the string alone.

use crate::key_hash::KeyHash;
use crate::rules::is_live;
use crate::{Entry, Millis, StoreError};

/// A key's stored bytes as read or written; empty when the key holds nothing
/// (a stored entry is never empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Raw(Vec<u8>);

impl Raw {
    /// No entry.
    pub(super) fn none() -> Self {
        Raw(Vec::new())
    }

    pub(crate) fn from_bytes(bytes: Vec<u8>) -> Self {
        Raw(bytes)
    }

    /// `entry`, encoded.
    pub(super) fn encode(entry: &Entry) -> Self {
        let mut bytes = entry.expires_at.to_string().into_bytes();
        bytes.push(b'|');
        // Writing a Value into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut bytes, &entry.value);
        Raw(bytes)
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// True when the key holds something.
    pub(super) fn is_some(&self) -> bool {
        !self.0.is_empty()
    }

    /// The live entry at `now`, if any; a string that does not parse is
    /// corrupt data under `key_hash`.
    pub(crate) fn decode(&self, now: Millis, key_hash: impl FnOnce() -> String) -> Result<Option<Entry>, StoreError> {
        if self.0.is_empty() {
            return Ok(None);
        }
        let parsed = (|| {
            let bar = self
                .0
                .iter()
                .position(|&b| b == b'|')
                .ok_or(("the stored string has no `<expires_at>|` prefix", None))?;
            let expires_at = std::str::from_utf8(&self.0[..bar])
                .ok()
                .and_then(|s| s.parse::<Millis>().ok())
                .ok_or(("the stored expiry is not a whole number of milliseconds", None))?;
            let value = serde_json::from_slice(&self.0[bar + 1..])
                .map_err(|e| ("the stored value is not JSON", Some(Box::new(e) as crate::error::BoxError)))?;
            Ok((value, expires_at))
        })();
        let (value, expires_at) = parsed.map_err(|(detail, source): (&str, _)| StoreError::Corrupt {
            key_hash: key_hash(),
            detail: detail.to_owned(),
            source,
        })?;
        let entry = Entry { value, expires_at };
        Ok(is_live(&entry, now).then_some(entry))
    }
}

/// The live entries of `held` at `now`; a corrupt one fails under its hash.
pub(super) fn decode(held: &[Raw], hashes: &[KeyHash], now: Millis) -> Result<Vec<Option<Entry>>, StoreError> {
    held.iter().zip(hashes).map(|(raw, hash)| raw.decode(now, || crate::key_hash::hex(hash))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_judges_liveness() {
        let entry = Entry { value: json!({"n": 3, "s": "a|b"}), expires_at: 1_000 };
        let raw = Raw::encode(&entry);
        assert_eq!(raw.as_bytes(), br#"1000|{"n":3,"s":"a|b"}"#);
        assert_eq!(raw.decode(999, String::new).unwrap(), Some(entry));
        assert_eq!(raw.decode(1_000, String::new).unwrap(), None);
        assert_eq!(Raw::none().decode(0, String::new).unwrap(), None);
        let negative = Raw::encode(&Entry { value: json!(1), expires_at: -5 });
        assert_eq!(negative.decode(-6, String::new).unwrap().unwrap().expires_at, -5);
    }

    #[test]
    fn what_does_not_parse_is_corrupt_under_its_hash() {
        for bad in [&b"no bar"[..], b"12x|1", b"|1", b"99999999999999999999999|1", b"10|{not json", b"\xff|1"] {
            let err = Raw::from_bytes(bad.to_vec()).decode(0, || "abc".into()).unwrap_err();
            assert!(err.is_corrupt() && err.to_string().contains("abc"), "{err}");
        }
    }
}
