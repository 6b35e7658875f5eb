//! SipHash-1-3 with a 128-bit output, as the `siphasher` crate's
//! `SipHasher13::finish128` gives it (the tests hold the two equal), written
//! for the two ways the store hashes: a whole key ([`hash`]), and a start of
//! keys hashed once and kept ([`Started`]), then a key's rest. Either is one
//! slice, read a block of eight bytes at a time straight from the caller's
//! bytes and finished at once; the crate's `Hasher` keeps its unread bytes
//! between writes and reads them back a byte group at a time.

/// The four words of SipHash's state.
#[derive(Clone, Copy)]
struct State {
    v0: u64,
    v1: u64,
    v2: u64,
    v3: u64,
}

impl State {
    /// The state under the key `(k0, k1)`, with the 128-bit output's change
    /// to `v1` (`0xee`) folded into its constant.
    fn new(k0: u64, k1: u64) -> Self {
        State {
            v0: k0 ^ 0x736f_6d65_7073_6575,
            v1: k1 ^ 0x646f_7261_6e64_6f83,
            v2: k0 ^ 0x6c79_6765_6e65_7261,
            v3: k1 ^ 0x7465_6462_7974_6573,
        }
    }

    /// One SipRound.
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

    /// Takes in one block of eight bytes (one round: SipHash-1-3).
    #[inline(always)]
    fn block(&mut self, m: u64) {
        self.v3 ^= m;
        self.round();
        self.v0 ^= m;
    }

    /// Takes in the whole blocks of `bytes`; gives back the bytes of the last,
    /// partial one, little-endian.
    #[inline(always)]
    fn blocks(&mut self, bytes: &[u8]) -> u64 {
        let mut blocks = bytes.chunks_exact(8);
        for block in &mut blocks {
            self.block(le_block(block));
        }
        le_bytes(blocks.remainder())
    }

    /// The 128-bit hash of `len` bytes in all, whose last `len % 8` are `tail`.
    #[inline(always)]
    fn finish(mut self, len: usize, tail: u64) -> u128 {
        // SipHash takes the length's low byte only: the truncation is its rule.
        #[allow(clippy::cast_possible_truncation)]
        let b = (u64::from(len as u8) << 56) | tail;
        self.block(b);
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
        u128::from(h1) | (u128::from(h2) << 64)
    }
}

/// The 128-bit hash of `bytes` under the key `(k0, k1)`.
#[inline]
pub(super) fn hash(k0: u64, k1: u64, bytes: &[u8]) -> u128 {
    let mut state = State::new(k0, k1);
    let tail = state.blocks(bytes);
    state.finish(bytes.len(), tail)
}

/// A start of keys taken in: the state after its whole blocks, and the bytes
/// of its last, partial block.
#[derive(Clone, Copy)]
pub(super) struct Started {
    state: State,
    /// The start's last `len % 8` bytes, little-endian.
    tail: u64,
    /// The start's length in bytes.
    len: usize,
}

impl Started {
    /// `start` taken in under the key `(k0, k1)`.
    pub(super) fn new(k0: u64, k1: u64, start: &[u8]) -> Self {
        let mut state = State::new(k0, k1);
        let tail = state.blocks(start);
        Started { state, tail, len: start.len() }
    }

    /// The start's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The 128-bit hash of the start followed by `rest`. Kept out of line, so
    /// that its callers stay small: inlining it into them did not make the
    /// count cheaper (instruction counts: `bash bench/instructions.sh`).
    #[inline(never)]
    pub(super) fn hash(&self, rest: &[u8]) -> u128 {
        let mut state = self.state;
        let len = self.len + rest.len();
        let held = self.len % 8;
        let mut rest = rest;
        if held != 0 {
            // The start's partial block, filled from the front of `rest`.
            let wanted = 8 - held;
            if rest.len() < wanted {
                return state.finish(len, self.tail | (le_bytes(rest) << (8 * held)));
            }
            let (front, more) = rest.split_at(wanted);
            state.block(self.tail | (le_bytes(front) << (8 * held)));
            rest = more;
        }
        let tail = state.blocks(rest);
        state.finish(len, tail)
    }
}

/// A whole block of eight bytes, little-endian.
#[inline(always)]
fn le_block(block: &[u8]) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(block);
    u64::from_le_bytes(word)
}

/// Up to seven bytes, little-endian, the rest of the word zero: the widest
/// reads that fit (four, two, one bytes), as SipHash's reference reads a
/// block's tail.
#[inline(always)]
fn le_bytes(bytes: &[u8]) -> u64 {
    debug_assert!(bytes.len() < 8, "a partial block has at most seven bytes");
    let mut word = 0;
    let mut at = 0;
    if let Some(four) = bytes.first_chunk::<4>() {
        word = u64::from(u32::from_le_bytes(*four));
        at = 4;
    }
    if let Some(two) = bytes.get(at..).and_then(<[u8]>::first_chunk::<2>) {
        word |= u64::from(u16::from_le_bytes(*two)) << (8 * at);
        at += 2;
    }
    if let Some(&one) = bytes.get(at) {
        word |= u64::from(one) << (8 * at);
    }
    word
}

#[cfg(test)]
mod tests {
    use std::hash::Hasher;

    use proptest::prelude::*;
    use siphasher::sip128::{Hasher128, SipHasher13};

    use super::*;

    /// The `siphasher` crate's 128-bit SipHash-1-3 of `bytes`.
    fn theirs(k0: u64, k1: u64, bytes: &[u8]) -> u128 {
        let mut sip = SipHasher13::new_with_keys(k0, k1);
        sip.write(bytes);
        sip.finish128().as_u128()
    }

    #[test]
    fn every_split_of_short_keys_hashes_as_the_reference() {
        let (k0, k1) = (0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908);
        let bytes: Vec<u8> = (0..=40u8).collect();
        for len in 0..bytes.len() {
            let key = &bytes[..len];
            assert_eq!(hash(k0, k1, key), theirs(k0, k1, key), "{len} whole");
            for split in 0..=len {
                let (start, rest) = key.split_at(split);
                assert_eq!(Started::new(k0, k1, start).hash(rest), theirs(k0, k1, key), "{len} split at {split}");
            }
        }
    }

    proptest! {
        #[test]
        fn any_key_split_anywhere_hashes_as_the_reference(
            k0: u64,
            k1: u64,
            key in proptest::collection::vec(any::<u8>(), 0..300),
            split: prop::sample::Index,
        ) {
            let split = split.index(key.len() + 1);
            let (start, rest) = key.split_at(split);
            prop_assert_eq!(Started::new(k0, k1, start).hash(rest), theirs(k0, k1, &key));
            prop_assert_eq!(hash(k0, k1, &key), theirs(k0, k1, &key));
        }
    }
}
