//! The entries this instance last saw or wrote, per key hash: what a store
//! guesses a key holds before the server says (see [`crate::server_clock`]).
//! A guess is never trusted: the server checks it in the call that writes.

use hashbrown::HashMap;
use parking_lot::Mutex;

use crate::key_hash::KeyHash;

const SHARDS: usize = 64;

/// The last entry this instance saw or wrote for each of up to `capacity` keys.
/// Holds key hashes (HMACs), never keys.
#[derive(Debug)]
pub(crate) struct LastSeen<V> {
    shards: Vec<Mutex<HashMap<KeyHash, V>>>,
    per_shard: usize,
}

impl<V: Clone> LastSeen<V> {
    pub(crate) fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS);
        LastSeen { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), per_shard }
    }

    fn shard(&self, hash: &KeyHash) -> &Mutex<HashMap<KeyHash, V>> {
        // The hash is an HMAC: any of its bytes is uniform.
        &self.shards[usize::from(hash[0]) % SHARDS]
    }

    /// The row remembered for `hash`.
    pub(crate) fn get(&self, hash: &KeyHash) -> Option<V> {
        if self.per_shard == 0 {
            return None;
        }
        self.shard(hash).lock().get(hash).cloned()
    }

    /// Remembers `row` as the row of `hash` now (`None`: no row).
    pub(crate) fn set(&self, hash: &KeyHash, row: Option<V>) {
        if self.per_shard == 0 {
            return;
        }
        let mut shard = self.shard(hash).lock();
        match row {
            None => {
                shard.remove(hash);
            }
            Some(row) => {
                if shard.len() >= self.per_shard && !shard.contains_key(hash) {
                    // Full: forget one row. Keys are HMACs, so the first in the
                    // table's order is as good as a random one.
                    if let Some(old) = shard.keys().next().copied() {
                        shard.remove(&old);
                    }
                }
                shard.insert(*hash, row);
            }
        }
    }

    /// Rows remembered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Stored {
        value: String,
    }

    fn row(n: i64) -> Stored {
        Stored { value: n.to_string() }
    }

    #[test]
    fn remembers_and_forgets_rows() {
        let seen = LastSeen::new(1_000);
        let a = [1u8; 32];
        assert!(seen.get(&a).is_none());
        seen.set(&a, Some(row(1)));
        assert_eq!(seen.get(&a).unwrap().value, "1");
        seen.set(&a, Some(row(2)));
        assert_eq!(seen.get(&a).unwrap().value, "2");
        seen.set(&a, None);
        assert!(seen.get(&a).is_none());
    }

    #[test]
    fn stays_within_its_capacity() {
        let seen = LastSeen::new(SHARDS * 4);
        for i in 0..10_000u32 {
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&i.to_le_bytes());
            seen.set(&hash, Some(row(i.into())));
        }
        assert!(seen.len() <= SHARDS * 4, "{} rows remembered", seen.len());
        let none = LastSeen::new(0);
        none.set(&[1u8; 32], Some(row(1)));
        assert!(none.get(&[1u8; 32]).is_none());
    }
}
