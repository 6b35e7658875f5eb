//! The store's key hash: the `siphasher` crate's 128-bit SipHash-1-3, for
//! the two ways the store hashes: a whole key ([`hash`]), and a start of
//! keys hashed once and kept ([`Started`]), then a key's rest. SipHash reads
//! its input as one stream of bytes, so the start and the rest hash as the
//! whole key does.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

/// The 128-bit SipHash-1-3 of `bytes` under the key `(k0, k1)`.
pub(super) fn hash(k0: u64, k1: u64, bytes: &[u8]) -> u128 {
    let mut hasher = SipHasher13::new_with_keys(k0, k1);
    hasher.write(bytes);
    hasher.finish128().as_u128()
}

/// A start of keys taken in: the hasher after it, and its length.
#[derive(Clone)]
pub(super) struct Started {
    hasher: SipHasher13,
    len: usize,
}

impl Started {
    /// `start` taken in under the key `(k0, k1)`.
    pub(super) fn new(k0: u64, k1: u64, start: &[u8]) -> Self {
        let mut hasher = SipHasher13::new_with_keys(k0, k1);
        hasher.write(start);
        Started { hasher, len: start.len() }
    }

    /// The start's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The 128-bit hash of the start followed by `rest`.
    pub(super) fn hash(&self, rest: &[u8]) -> u128 {
        let mut hasher = self.hasher;
        hasher.write(rest);
        hasher.finish128().as_u128()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A start and its rest hash as the whole key, split anywhere.
        #[test]
        fn any_key_split_anywhere_hashes_as_the_whole(
            k0: u64,
            k1: u64,
            key in proptest::collection::vec(any::<u8>(), 0..300),
            split: prop::sample::Index,
        ) {
            let split = split.index(key.len() + 1);
            let (start, rest) = key.split_at(split);
            prop_assert_eq!(Started::new(k0, k1, start).hash(rest), hash(k0, k1, &key));
        }
    }
}
