//! Store keys of limits: `{limit}:{part}:{value}`, or, when that would pass the
//! store's 1024-byte key limit, `{limit}:{part}#{sha256 of value, hex}`. Names
//! never hold `:` or `#`, so the two forms can't meet.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::MAX_KEY_BYTES;

/// The store key of `value` on `part` of `limit`.
pub(crate) fn key(limit: &str, part: &str, value: &str) -> String {
    if limit.len() + part.len() + value.len() + 2 <= MAX_KEY_BYTES {
        let mut key = String::with_capacity(limit.len() + part.len() + value.len() + 2);
        key.push_str(limit);
        key.push(':');
        key.push_str(part);
        key.push(':');
        key.push_str(value);
        return key;
    }
    let mut key = format!("{limit}:{part}#");
    for byte in Sha256::digest(value.as_bytes()) {
        let _ = write!(key, "{byte:02x}");
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
