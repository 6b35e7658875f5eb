//! A server's clock (a database's, Redis's), estimated between its readings,
//! so that a count may run `apply` before the server answers.
//!
//! A store that remembers a key's last entry ([`LastSeen`](crate::last_seen::LastSeen))
//! runs `apply` on it at the estimated clock and sends the write with a
//! condition, checked by the server in the same call: the entry is still as
//! remembered, and the server's clock is within [`MAX_LEAD_MS`] before and
//! [`MAX_LAG_MS`] after the estimate. If either is off, nothing is written
//! and the server answers the entry and its clock, so the count goes on as
//! if it had read first. Neither the memory nor the estimate is trusted for
//! correctness.

use std::time::Instant;

use parking_lot::Mutex;

use crate::Millis;

/// The most the server's clock may be past the estimate an `apply` was
/// given when the write runs. Beyond it the guess is not used: the count
/// reads the clock instead. It is the same order as the gap, on the locked
/// path, between the clock read under the lock and the commit.
pub(crate) const MAX_LAG_MS: i64 = 50;

/// How far the estimate may be ahead of the server's clock (it should never
/// be; this is for rounding to whole milliseconds).
pub(crate) const MAX_LEAD_MS: i64 = 2;

/// A reading this far behind the estimate means the server's clock was set
/// back; nearer ones are readings that took longer to arrive.
const SET_BACK_MS: i64 = 1_000;

/// The server's clock, estimated from the clock readings its answers carry
/// and this machine's monotonic clock: a reading `db` received at local time
/// `t` says the server's clock is at least `db + (now - t)` now. The
/// estimate is the largest such bound among the readings of the last one to
/// two [`PERIOD_US`], so it trails the server's clock by about the one-way
/// trip of a recent reading. Older readings age out: if this machine's clock
/// runs faster than the server's, their bounds drift ahead of it, and an
/// estimate ahead of the server turns the one-statement path off. A
/// reading well behind the estimate (the server's clock was set back)
/// replaces it at once.
#[derive(Debug)]
pub(crate) struct ServerClock {
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

impl ServerClock {
    pub(crate) fn new() -> Self {
        ServerClock {
            origin: Instant::now(),
            offsets: Mutex::new(Offsets { period: 0, this: i64::MIN, last: i64::MIN }),
        }
    }

    fn local_us(&self) -> i64 {
        i64::try_from(self.origin.elapsed().as_micros()).unwrap_or(i64::MAX)
    }

    /// A reading of the server's clock, just received.
    pub(crate) fn reading(&self, db: Millis) {
        self.reading_at(db, self.local_us());
    }

    fn reading_at(&self, db: Millis, local_us: i64) {
        let offset = db.saturating_mul(1_000).saturating_sub(local_us);
        let mut o = self.offsets.lock();
        o.age(local_us);
        let best = o.this.max(o.last);
        if best != i64::MIN && offset < best - SET_BACK_MS * 1_000 {
            // The server's clock went back: start again from this reading.
            (o.this, o.last) = (offset, i64::MIN);
        } else {
            o.this = o.this.max(offset);
        }
    }

    /// Moves the estimate by `ms`, as a wrong one would be.
    #[cfg(test)]
    pub(crate) fn shift(&self, ms: i64) {
        let o = &mut *self.offsets.lock();
        for bound in [&mut o.this, &mut o.last] {
            if *bound != i64::MIN {
                *bound += ms * 1_000;
            }
        }
    }

    /// The server's clock now, in ms, as estimated; `None` before any
    /// reading, or when the last one is more than two periods old.
    pub(crate) fn estimate(&self) -> Option<Millis> {
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

    #[test]
    fn the_estimate_is_the_latest_lower_bound() {
        let clock = ServerClock::new();
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
        let clock = ServerClock::new();
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
