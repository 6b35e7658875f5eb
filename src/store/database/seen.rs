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
/// estimate is the largest such bound among the readings of the last one to
/// two [`PERIOD_US`], so it trails the database's clock by about the one-way
/// trip of a recent reading. Older readings age out: if this machine's clock
/// runs faster than the database's, their bounds drift ahead of it, and an
/// estimate ahead of the database turns the one-statement path off. A
/// reading well behind the estimate (the database's clock was set back)
/// replaces it at once.
#[derive(Debug)]
pub(super) struct DbClock {
    origin: Instant,
    offsets: Mutex<Offsets>,
}

/// The best bounds (database clock minus local monotonic clock, in µs) of
/// this period and the one before; `i64::MIN` where there was no reading.
#[derive(Debug)]
struct Offsets {
    period: i64,
    this: i64,
    last: i64,
}

/// How long a reading's bound counts: between one and two of these.
const PERIOD_US: i64 = 1_000_000;

impl DbClock {
    pub(super) fn new() -> Self {
        DbClock { origin: Instant::now(), offsets: Mutex::new(Offsets { period: 0, this: i64::MIN, last: i64::MIN }) }
    }

    fn local_us(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    /// A reading of the database's clock, just received.
    pub(super) fn reading(&self, db: Millis) {
        self.reading_at(db, self.local_us());
    }

    fn reading_at(&self, db: Millis, local_us: i64) {
        let offset = db.saturating_mul(1_000).saturating_sub(local_us);
        let mut o = self.offsets.lock();
        o.age(local_us);
        let best = o.this.max(o.last);
        if best != i64::MIN && offset < best - SET_BACK_MS * 1_000 {
            // The database's clock went back: start again from this reading.
            (o.this, o.last) = (offset, i64::MIN);
        } else {
            o.this = o.this.max(offset);
        }
    }

    /// Moves the estimate by `ms`, as a wrong one would be.
    #[cfg(test)]
    pub(super) fn shift(&self, ms: i64) {
        let o = &mut *self.offsets.lock();
        for bound in [&mut o.this, &mut o.last] {
            if *bound != i64::MIN {
                *bound += ms * 1_000;
            }
        }
    }

    /// The database's clock now, in ms, as estimated; `None` before any
    /// reading, or when the last one is more than two periods old.
    pub(super) fn estimate(&self) -> Option<Millis> {
        self.estimate_at(self.local_us())
    }

    fn estimate_at(&self, local_us: i64) -> Option<Millis> {
        let mut o = self.offsets.lock();
        o.age(local_us);
        let best = o.this.max(o.last);
        (best != i64::MIN).then(|| local_us.saturating_add(best).div_euclid(1_000))
    }
}

impl Offsets {
    /// Moves on to the period of `local_us`, forgetting bounds two periods old.
    fn age(&mut self, local_us: i64) {
        let period = local_us / PERIOD_US;
        if period == self.period {
            return;
        }
        self.last = if period == self.period + 1 { self.this } else { i64::MIN };
        self.this = i64::MIN;
        self.period = period;
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

    /// This machine's clock runs 500 ppm faster than the database's (as fast
    /// as NTP slews a clock): every
    /// reading's bound drifts ahead of the database as it ages. The estimate
    /// stays close enough for the one-statement path's window, which an
    /// estimate that only ever rose would leave after a fraction of a second.
    #[test]
    fn the_estimate_follows_a_database_clock_that_runs_slower() {
        let clock = DbClock::new();
        let db_at = |local_us: i64| 1_000_000 + local_us * 9_995 / 10_000 / 1_000;
        let mut local_us = 0;
        while local_us < 10_000_000 {
            clock.reading_at(db_at(local_us), local_us);
            local_us += 5_000;
            let est = clock.estimate_at(local_us).unwrap();
            let db = db_at(local_us);
            if local_us > 100_000 {
                assert!(
                    (est - MAX_LEAD_MS..=est + MAX_LAG_MS).contains(&db),
                    "at {local_us} µs the estimate {est} is off the database's clock {db}"
                );
            }
        }
        // Ahead of the database by at most the drift of two periods.
        let est = clock.estimate_at(local_us).unwrap();
        assert!(est - db_at(local_us) <= 2, "{est} vs {}", db_at(local_us));
        // With no reading for two periods there is no estimate to trust.
        assert_eq!(clock.estimate_at(local_us + 2 * PERIOD_US + 1), None);
    }
}
