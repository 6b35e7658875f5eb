//! What lets a count on PostgreSQL take one round trip instead of two: the
//! rows this instance last saw or wrote, and an estimate of the database's
//! clock.
//!
//! A count normally reads the row and the clock, runs `apply`, then writes
//! only if the row is still as read: two round trips. When this instance
//! remembers the row (it wrote it last), it runs `apply` on the remembered
//! row and the estimated clock first, and sends the write with a condition
//! that holds only if the row is still as remembered and the database's clock
//! is within [`MAX_LAG_MS`] after the estimate. If either is off, nothing is
//! written and the same statement returns the row and the clock, so the
//! count goes on exactly as before. A wrong guess never costs more round
//! trips than no guess.
//!
//! Neither part is trusted for correctness: the condition is checked by the
//! database, in the statement that writes.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use hashbrown::HashMap;
use parking_lot::Mutex;

use super::row::{KeyHash, Stored};
use crate::Millis;

/// The most the database's clock may be past the estimate an `apply` was
/// given when the write runs. Beyond it the guess is not used: the count
/// reads the clock instead. It is the same order as the gap, on the locked
/// path, between the clock read under the lock and the commit.
pub(super) const MAX_LAG_MS: i64 = 50;

/// How far the estimate may be ahead of the database's clock (it should never
/// be; this is for rounding to whole milliseconds).
pub(super) const MAX_LEAD_MS: i64 = 2;

/// A reading this far behind the estimate means the database's clock was set
/// back; nearer ones are readings that took longer to arrive.
const SET_BACK_MS: i64 = 1_000;

const SHARDS: usize = 64;

/// The last row this instance saw or wrote for each of up to `capacity` keys.
/// Holds key hashes (HMACs), never keys.
#[derive(Debug)]
pub(super) struct Seen {
    shards: Vec<Mutex<HashMap<KeyHash, Stored>>>,
    per_shard: usize,
}

impl Seen {
    pub(super) fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS);
        Seen { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(), per_shard }
    }

    fn shard(&self, hash: &KeyHash) -> &Mutex<HashMap<KeyHash, Stored>> {
        // The hash is an HMAC: any of its bytes is uniform.
        &self.shards[usize::from(hash[0]) % SHARDS]
    }

    /// The row remembered for `hash`.
    pub(super) fn get(&self, hash: &KeyHash) -> Option<Stored> {
        if self.per_shard == 0 {
            return None;
        }
        self.shard(hash).lock().get(hash).cloned()
    }

    /// Remembers `row` as the row of `hash` now (`None`: no row).
    pub(super) fn set(&self, hash: &KeyHash, row: Option<Stored>) {
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
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}

/// The database's clock, estimated from the clock readings its answers carry
/// and this machine's monotonic clock: a reading `db` received at local time
/// `t` says the database's clock is at least `db + (now - t)` now. The
/// estimate is the largest such bound, so it trails the database's clock by
/// about the one-way trip of the latest reading. A reading well behind the
/// estimate (the database's clock was set back) replaces it.
#[derive(Debug)]
pub(super) struct DbClock {
    origin: Instant,
    /// Database clock minus local monotonic clock, in µs; `i64::MIN` before
    /// the first reading.
    offset_us: AtomicI64,
}

impl DbClock {
    pub(super) fn new() -> Self {
        DbClock { origin: Instant::now(), offset_us: AtomicI64::new(i64::MIN) }
    }

    fn local_us(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    /// A reading of the database's clock, just received.
    pub(super) fn reading(&self, db: Millis) {
        let offset = db.saturating_mul(1_000).saturating_sub(self.local_us());
        let current = self.offset_us.load(Ordering::Relaxed);
        if current != i64::MIN && offset < current - SET_BACK_MS * 1_000 {
            // The database's clock went back: start again from this reading.
            self.offset_us.store(offset, Ordering::Relaxed);
        } else {
            self.offset_us.fetch_max(offset, Ordering::Relaxed);
        }
    }

    /// Moves the estimate by `ms`, as a wrong one would be.
    #[cfg(test)]
    pub(super) fn shift(&self, ms: i64) {
        self.offset_us.fetch_add(ms * 1_000, Ordering::Relaxed);
    }

    /// The database's clock now, in ms, as estimated; `None` before any reading.
    pub(super) fn estimate(&self) -> Option<Millis> {
        let offset = self.offset_us.load(Ordering::Relaxed);
        (offset != i64::MIN).then(|| (self.local_us().saturating_add(offset)).div_euclid(1_000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: i64) -> Stored {
        Stored { generation: 1, value: n.to_string(), expires_at: 10_000 }
    }

    #[test]
    fn remembers_and_forgets_rows() {
        let seen = Seen::new(1_000);
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
        let seen = Seen::new(SHARDS * 4);
        for i in 0..10_000u32 {
            let mut hash = [0u8; 32];
            hash[..4].copy_from_slice(&i.to_le_bytes());
            seen.set(&hash, Some(row(i.into())));
        }
        assert!(seen.len() <= SHARDS * 4, "{} rows remembered", seen.len());
        let none = Seen::new(0);
        none.set(&[1u8; 32], Some(row(1)));
        assert!(none.get(&[1u8; 32]).is_none());
    }

    #[test]
    fn the_estimate_is_the_latest_lower_bound() {
        let clock = DbClock::new();
        assert_eq!(clock.estimate(), None);
        clock.reading(1_000_000);
        let first = clock.estimate().unwrap();
        assert!((1_000_000..1_000_050).contains(&first), "{first}");
        // An older reading (it travelled longer) does not pull it back.
        clock.reading(999_900);
        assert!(clock.estimate().unwrap() >= first);
        // A later one moves it on.
        clock.reading(1_000_500);
        assert!(clock.estimate().unwrap() >= 1_000_500);
        // The database's clock set back a minute: the estimate follows.
        clock.reading(940_000);
        let back = clock.estimate().unwrap();
        assert!((940_000..940_050).contains(&back), "{back}");
    }
}
