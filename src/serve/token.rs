//! The API token: checked when it is made, so a blank or short token can't
//! reach the router, and kept only as its SHA-256 digest, so a request's
//! check compares two digests of one size in constant time and its answer
//! never depends on the token's length.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The fewest bytes a token may have.
pub(crate) const MIN_TOKEN_BYTES: usize = 16;

/// A token callers must send as `Authorization: Bearer <token>`: at least
/// 16 bytes, each a visible ASCII character (what a header
/// carries). Its `Debug` shows `***`.
#[derive(Clone)]
pub struct ApiToken {
    digest: [u8; 32],
}

impl std::fmt::Debug for ApiToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiToken(***)")
    }
}

/// Why a token was refused; the message says what to set instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Empty, or only white space.
    #[error(
        "the API token is blank: anyone could send it. Set LIMIT_STORE_API_TOKEN (or --token-file) to a \
         random string of at least 16 bytes, as `openssl rand -hex 32` prints"
    )]
    Blank,
    /// Fewer than 16 bytes.
    #[error(
        "the API token is {len} bytes: too short to resist guessing. Set LIMIT_STORE_API_TOKEN (or \
         --token-file) to a random string of at least 16 bytes, as `openssl rand -hex 32` prints"
    )]
    Short {
        /// Its length in bytes.
        len: usize,
    },
    /// A character an `Authorization` header can't carry (a space, a control
    /// character, or anything past ASCII), so no caller could send it.
    #[error(
        "the API token holds a space, a control character or a non-ASCII character, which no caller can \
         send in a header. Set LIMIT_STORE_API_TOKEN (or --token-file) to visible ASCII of at least 16 \
         bytes, as `openssl rand -hex 32` prints"
    )]
    Unsendable,
}

impl ApiToken {
    /// The token `token`, as callers will send it (nothing is trimmed).
    pub fn new(token: &str) -> Result<ApiToken, TokenError> {
        if token.trim().is_empty() {
            return Err(TokenError::Blank);
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::Unsendable);
        }
        if token.len() < MIN_TOKEN_BYTES {
            return Err(TokenError::Short { len: token.len() });
        }
        Ok(ApiToken { digest: digest(token.as_bytes()) })
    }

    /// True when `given` is the token. Compares the two digests in constant
    /// time: the work depends on `given`'s length only.
    pub(crate) fn matches(&self, given: &[u8]) -> bool {
        bool::from(digest(given).ct_eq(&self.digest))
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_short_and_unsendable_tokens_are_refused() {
        assert_eq!(ApiToken::new("").unwrap_err(), TokenError::Blank);
        assert_eq!(ApiToken::new(" \t\n ").unwrap_err(), TokenError::Blank);
        assert_eq!(ApiToken::new("fifteen-bytes!!").unwrap_err(), TokenError::Short { len: 15 });
        assert_eq!(ApiToken::new("sixteen bytes ok").unwrap_err(), TokenError::Unsendable);
        assert_eq!(ApiToken::new("sixteen-bytes-é!").unwrap_err(), TokenError::Unsendable);
        assert!(ApiToken::new("sixteen-bytes-ok").is_ok());
        for e in [TokenError::Blank, TokenError::Short { len: 3 }, TokenError::Unsendable] {
            let text = e.to_string();
            assert!(text.contains("LIMIT_STORE_API_TOKEN") && text.contains("16 bytes"), "{text}");
        }
    }

    /// Only the token matches: not a prefix of it, not it and more, not
    /// empty. What is kept is a digest of one size whatever the token's
    /// length, so the check can't tell a caller how long the token is.
    #[test]
    fn only_the_token_matches_and_only_its_digest_is_kept() {
        let token = "a-long-random-token-0123456789abcdef";
        let checked = ApiToken::new(token).unwrap();
        assert!(checked.matches(token.as_bytes()));
        for wrong in [
            "",
            "a",
            &token[..16],
            &token[..token.len() - 1],
            &format!("{token}0"),
            "A-LONG-RANDOM-TOKEN-0123456789ABCDEF",
        ] {
            assert!(!checked.matches(wrong.as_bytes()), "{wrong:?}");
        }
        assert_eq!(std::mem::size_of::<ApiToken>(), 32);
        assert_eq!(format!("{checked:?}"), "ApiToken(***)");
    }
}
