//! How the database store names a row: HMAC-SHA-256 of the key under the site
//! secret, never the key itself, and the secret's generation.
//!
//! A plain hash would not do: a dictionary of emails or every IPv4 address is
//! small enough to hash whole and reverse. Under a secret of 32 bytes or more,
//! a dump of the table tells nothing about the keys.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::StoreError;

/// A key's HMAC-SHA-256 under the site secret: what stores name entries by.
pub(crate) type KeyHash = [u8; 32];

/// The shortest secret the database store accepts, in bytes.
pub const MIN_SECRET_BYTES: usize = 32;

/// The site secret keys are hashed under. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Secret {
    mac: Hmac<Sha256>,
    generation: i64,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secret").field("generation", &self.generation).finish_non_exhaustive()
    }
}

impl Secret {
    /// Checks and takes `secret`: at least 32 bytes.
    pub fn new(secret: &str) -> Result<Self, StoreError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(StoreError::setup(format!(
                "the site secret is {} bytes: it needs at least {MIN_SECRET_BYTES} bytes (set LIMIT_STORE_SECRET, or \
                 rate_limit.secret in limit-store.toml, to a long random string, e.g. `openssl rand -base64 48`)",
                secret.len()
            )));
        }
        let mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
            .map_err(|e| StoreError::setup(format!("the secret can't key HMAC-SHA-256: {e}")))?;
        Ok(Secret { mac, generation: generation_of(secret) })
    }

    /// The row name of `key`: HMAC-SHA-256 under the secret.
    pub fn key_hash(&self, key: &str) -> KeyHash {
        let mut mac = self.mac.clone();
        mac.update(key.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The secret's generation: a short fingerprint that tells rows written
    /// under it from rows written under another, without revealing it.
    pub fn generation(&self) -> i64 {
        self.generation
    }
}

/// `hash` in lowercase hex, appended to `out`: how stores name a key hash in
/// keys and in errors.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) fn push_hex(out: &mut String, hash: &[u8]) {
    out.extend(hex_digits(hash).map(char::from));
}

/// `hash` in lowercase hex, digit by digit, as [`push_hex`] writes it.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) fn hex_digits(hash: &[u8]) -> impl Iterator<Item = u8> + '_ {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    hash.iter().flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0xf)]])
}

/// `hash` in lowercase hex.
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
pub(crate) fn hex(hash: &[u8]) -> String {
    let mut out = String::with_capacity(hash.len() * 2);
    push_hex(&mut out, hash);
    out
}

/// The first 6 bytes of SHA-256 over a label and the secret, as a positive
/// number (it fits every database's integer type and reads well in `stats`).
fn generation_of(secret: &str) -> i64 {
    let digest = Sha256::new().chain_update(b"limit-store generation\0").chain_update(secret.as_bytes()).finalize();
    let mut bytes = [0u8; 8];
    bytes[2..].copy_from_slice(&digest[..6]);
    i64::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_secrets_are_refused_with_advice() {
        let err = Secret::new("too short").unwrap_err().to_string();
        assert!(err.contains("at least 32 bytes") && err.contains("LIMIT_STORE_SECRET"), "{err}");
        assert!(Secret::new(&"s".repeat(32)).is_ok());
    }

    #[test]
    fn the_key_hash_is_an_hmac_not_a_plain_hash() {
        let secret = Secret::new(&"s".repeat(40)).unwrap();
        let plain: [u8; 32] = Sha256::digest(b"ada@example.com").into();
        assert_ne!(secret.key_hash("ada@example.com"), plain);
        assert_eq!(secret.key_hash("ada@example.com"), secret.key_hash("ada@example.com"));
        let other = Secret::new(&"t".repeat(40)).unwrap();
        assert_ne!(secret.key_hash("ada@example.com"), other.key_hash("ada@example.com"));
        assert_ne!(secret.generation(), other.generation());
        assert!(secret.generation() > 0);
        assert!(!format!("{secret:?}").contains("sss"));
    }
}
