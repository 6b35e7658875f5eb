//! The store's key hash: 128-bit SipHash-1-3 (the `siphasher` crate's
//! `sip128::SipHasher13`, bit for bit), for the two ways the store hashes:
//! a whole key ([`hash`]), and a start of keys taken in once and kept
//! ([`Started`]), then a key's rest. SipHash reads its input as one stream
//! of bytes, so the start and the rest hash as the whole key does.
//!
//! Written here for short keys: the rest is read a word at a time, the
//! bytes that don't fill one with two overlapping loads, with no loop over
//! bytes and no buffer kept between writes, and the rounds inlined into
//! the one hash, its state in registers.

/// The state of SipHash's four words.
#[derive(Clone, Copy)]
struct State {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl State {
    /// The state under the key `(k0, k1)`, for a 128-bit hash.
    fn new(k0: u64, k1: u64) -> Self {
        State {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f83,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    #[inline(always)]
    fn round(&mut self) {
        self.v0 = self.v0.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(13) ^ self.v0;
        self.v0 = self.v0.rotate_left(32);
        self.v2 = self.v2.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(16) ^ self.v2;
        self.v0 = self.v0.wrapping_add(self.v3);
        self.v3 = self.v3.rotate_left(21) ^ self.v0;
        self.v2 = self.v2.wrapping_add(self.v1);
        self.v1 = self.v1.rotate_left(17) ^ self.v2;
        self.v2 = self.v2.rotate_left(32);
    }

    /// One word of input, one compression round (the "1" of 1-3).
    #[inline(always)]
    fn word(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.v0 ^= m;
    }

    /// The 128-bit hash after `len` bytes, the last `tail` (fewer than eight).
    #[inline(always)]
    fn finish(mut self, len: usize, tail: u64) -> u128 {
        // Only the length's low byte is hashed, as SipHash defines it.
        #[allow(clippy::cast_possible_truncation)]
        let b = u64::from(len as u8) << 56 | tail;
        self.word(b);
        self.v2 ^= 0xee;
        self.round();
        self.round();
        self.round();
        let h1 = self.v0 ^ self.v1 ^ self.v2 ^ self.v3;
        self.v1 ^= 0xdd;
        self.round();
        self.round();
        self.round();
        let h2 = self.v0 ^ self.v1 ^ self.v2 ^ self.v3;
        u128::from(h1) | u128::from(h2) << 64
    }
}

/// The first eight bytes of `bytes` (at least eight), little-endian.
#[inline(always)]
fn word(bytes: &[u8]) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(w)
}

/// Fewer than eight bytes as one word, the first lowest, the rest zero:
/// two loads that may overlap (a byte read twice lands in the same place).
#[inline(always)]
fn part(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let byte = |i: usize| u64::from(bytes[i]) << (8 * i);
    match n {
        0 => 0,
        1..=3 => byte(0) | byte(n / 2) | byte(n - 1),
        _ => {
            let half = |i: usize| u64::from(u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]));
            half(0) | half(n - 4) << (8 * (n - 4))
        }
    }
}

/// The 128-bit SipHash-1-3 of `bytes` under the key `(k0, k1)`.
pub(super) fn hash(k0: u64, k1: u64, bytes: &[u8]) -> u128 {
    Started::new(k0, k1, b"").hash(bytes)
}

/// A start of keys taken in: the state after its whole words, the bytes
/// left over (fewer than eight, as one word), and its length.
#[derive(Clone)]
pub(super) struct Started {
    state: State,
    tail: u64,
    len: usize,
}

impl Started {
    /// `start` taken in under the key `(k0, k1)`.
    pub(super) fn new(k0: u64, k1: u64, start: &[u8]) -> Self {
        let mut state = State::new(k0, k1);
        let mut words = start.chunks_exact(8);
        for w in &mut words {
            state.word(word(w));
        }
        Started { state, tail: part(words.remainder()), len: start.len() }
    }

    /// The start's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The 128-bit hash of the start followed by `rest`.
    pub(super) fn hash(&self, rest: &[u8]) -> u128 {
        let mut state = self.state;
        let held = self.len % 8;
        let len = self.len + rest.len();
        let mut rest = rest;
        let mut tail = self.tail;
        if held != 0 {
            let need = 8 - held;
            if rest.len() < need {
                return state.finish(len, tail | part(rest) << (8 * held));
            }
            let (fill, after) = rest.split_at(need);
            state.word(tail | part(fill) << (8 * held));
            rest = after;
        }
        let mut words = rest.chunks_exact(8);
        for w in &mut words {
            state.word(word(w));
        }
        tail = part(words.remainder());
        state.finish(len, tail)
    }
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use proptest::prelude::*;
    use siphasher::sip128::{Hasher128, SipHasher13};

    use super::*;

    /// The `siphasher` crate's 128-bit SipHash-1-3.
    fn reference(k0: u64, k1: u64, bytes: &[u8]) -> u128 {
        let mut hasher = SipHasher13::new_with_keys(k0, k1);
        hasher.write(bytes);
        hasher.finish128().as_u128()
    }

    #[test]
    fn every_length_hashes_as_siphasher() {
        let bytes: Vec<u8> = (0..300u32).map(|i| u8::try_from(i * 37 % 251).unwrap()).collect();
        for n in 0..bytes.len() {
            assert_eq!(hash(7, 9, &bytes[..n]), reference(7, 9, &bytes[..n]), "{n} bytes");
        }
    }

    proptest! {
        /// A start and its rest hash as the whole key, split anywhere, and
        /// as the `siphasher` crate hashes it.
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
            prop_assert_eq!(hash(k0, k1, &key), reference(k0, k1, &key));
        }
    }
}
