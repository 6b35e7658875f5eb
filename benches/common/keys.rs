//! What the side-by-side benches count on: the same keys as their peers, and
//! a draw of them per caller. Included with `#[path]`.

use sha2::{Digest, Sha256};

/// `n` keys: `user:` + 16 hex digits of SHA-256 of the index, 21 bytes each;
/// `bench/node/rlf.js` and `bench/limitador` build the same list.
pub(crate) fn keys(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let d = Sha256::digest(i.to_string().as_bytes());
            let hex: String = d[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("user:{hex}")
        })
        .collect()
}

/// A small xorshift per caller: uniform key indexes without a shared RNG.
pub(crate) struct Rng(u64);

impl Rng {
    /// Caller `c`'s own sequence.
    pub(crate) fn for_caller(c: usize) -> Rng {
        Rng(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x2545_F491_4F6C_DD1D))
    }

    /// The next index below `n`.
    pub(crate) fn next(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        usize::try_from(self.0 % n as u64).unwrap()
    }
}
