//! The last hour of a tally, a minute at a time: a ring of [`RING`] words
//! (the hour's [`MINUTES`] and a few more, a power of two so that a minute's
//! slot is a mask, not a division), the word of minute `m` (numbered from
//! the Unix epoch on the store's clock) at slot `m % 64`, holding which
//! minute it counts and its count. A count in a minute the slot does not hold yet moves the slot's
//! count to what the passed minutes counted and starts the minute at one,
//! so the ring keeps the last hour and the sum of it all stays exact.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::Millis;

/// Minutes a tally gives: an hour.
pub(super) const MINUTES: usize = 60;
/// Minutes the ring holds: the hour's and a few more.
const RING: usize = 64;
const _: () = assert!(RING >= MINUTES && RING.is_power_of_two());
const MINUTE_MS: Millis = 60_000;
/// Bits of a slot's count; the bits above hold its minute (the low 24 bits
/// of the minute's number: the same minute again after 31 years).
const COUNT_BITS: u32 = 40;
const COUNT: u64 = (1 << COUNT_BITS) - 1;

/// The minute `now` falls in, numbered from the Unix epoch (0 before it).
#[inline]
pub(super) fn minute_of(now: Millis) -> u64 {
    // Unsigned: a division by a constant without a signed one's fix-ups.
    u64::try_from(now).unwrap_or(0) / MINUTE_MS.unsigned_abs()
}

/// The time minute `minute` starts at.
pub(super) fn minute_start(minute: u64) -> Millis {
    Millis::try_from(minute).map_or(Millis::MAX, |m| m.saturating_mul(MINUTE_MS))
}

/// The bits a slot holds its minute in.
#[inline]
fn tag(minute: u64) -> u64 {
    minute << COUNT_BITS
}

/// The slot of `minute`.
#[inline]
#[allow(clippy::cast_possible_truncation)] // below 64: the cast loses nothing
fn slot(minute: u64) -> usize {
    (minute % RING as u64) as usize
}

/// One stripe of a tally: its ring of minutes and what the minutes the
/// ring moved past counted.
#[derive(Debug)]
pub(super) struct Hour {
    slots: [AtomicU64; RING],
    passed: AtomicU64,
}

impl Default for Hour {
    fn default() -> Self {
        Hour { slots: std::array::from_fn(|_| AtomicU64::new(0)), passed: AtomicU64::new(0) }
    }
}

impl Hour {
    /// Adds one in `minute`, by the one thread that writes this stripe: a
    /// plain load and store, no locked instruction.
    #[inline]
    pub(super) fn add_owned(&self, minute: u64) {
        let slot = &self.slots[slot(minute)];
        let word = slot.load(Relaxed);
        if word & !COUNT == tag(minute) {
            slot.store(word + 1, Relaxed);
        } else {
            self.start_owned(slot, word, minute);
        }
    }

    /// A minute the slot does not hold yet, by the stripe's one writer.
    #[cold]
    #[inline(never)]
    fn start_owned(&self, slot: &AtomicU64, word: u64, minute: u64) {
        // The minute first, the passed count after: a reader in between
        // misses the old minute's count for a moment, never counts it twice.
        slot.store(tag(minute) | 1, Relaxed);
        self.passed.store(self.passed.load(Relaxed).wrapping_add(word & COUNT), Relaxed);
    }

    /// Adds one in `minute`, on a stripe that threads share.
    pub(super) fn add_shared(&self, minute: u64) {
        let slot = &self.slots[slot(minute)];
        let mut word = slot.load(Relaxed);
        loop {
            let held = word & !COUNT == tag(minute);
            let next = if held { word + 1 } else { tag(minute) | 1 };
            match slot.compare_exchange_weak(word, next, Relaxed, Relaxed) {
                Ok(_) => {
                    if !held {
                        self.passed.fetch_add(word & COUNT, Relaxed);
                    }
                    return;
                }
                Err(seen) => word = seen,
            }
        }
    }

    /// Everything this stripe counted.
    pub(super) fn total(&self) -> u64 {
        let held = self.slots.iter().map(|s| s.load(Relaxed) & COUNT).fold(0, u64::wrapping_add);
        held.wrapping_add(self.passed.load(Relaxed))
    }

    /// Adds this stripe's counts of the hour that ends with minute `now`
    /// to `hour`, oldest minute first; minutes before the epoch count none.
    pub(super) fn add_hour_to(&self, now: u64, hour: &mut [u64; MINUTES]) {
        for (ago, count) in (0..MINUTES as u64).rev().zip(hour.iter_mut()) {
            let Some(minute) = now.checked_sub(ago) else { continue };
            let word = self.slots[slot(minute)].load(Relaxed);
            if word & !COUNT == tag(minute) {
                *count += word & COUNT;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    /// The hour ending at `now` on the clock, oldest first.
    fn hour(h: &Hour, clock: &ManualClock) -> [u64; MINUTES] {
        let mut out = [0; MINUTES];
        h.add_hour_to(minute_of(clock.now()), &mut out);
        out
    }

    /// Counts land in their minute, the newest last, as the clock moves.
    #[test]
    fn counts_land_in_their_minute() {
        let clock = ManualClock::new(1_700_000_000_000);
        let h = Hour::default();
        for _ in 0..3 {
            h.add_owned(minute_of(clock.now()));
        }
        clock.advance(std::time::Duration::from_secs(60));
        h.add_owned(minute_of(clock.now()));
        h.add_shared(minute_of(clock.now()));
        let seen = hour(&h, &clock);
        assert_eq!(&seen[MINUTES - 2..], &[3, 2]);
        assert_eq!(seen.iter().sum::<u64>(), 5);
        assert_eq!(h.total(), 5);
    }

    /// An hour on, a minute is out of the hour; when its slot comes round
    /// again, it counts the new minute from zero, and what it held is still
    /// in the total.
    #[test]
    fn an_hour_on_old_minutes_are_reset() {
        let clock = ManualClock::new(1_700_000_000_000);
        let h = Hour::default();
        for _ in 0..4 {
            h.add_owned(minute_of(clock.now()));
        }
        clock.advance(std::time::Duration::from_secs(59 * 60));
        assert_eq!(hour(&h, &clock)[0], 4, "59 minutes on, the oldest minute of the hour");
        clock.advance(std::time::Duration::from_secs(60));
        assert_eq!(hour(&h, &clock), [0; MINUTES], "an hour on, out of it, though not yet overwritten");
        // The ring's length on, the same slot: it counts its new minute from zero.
        clock.advance(std::time::Duration::from_secs((RING - MINUTES) as u64 * 60));
        h.add_owned(minute_of(clock.now()));
        h.add_shared(minute_of(clock.now()));
        let seen = hour(&h, &clock);
        assert_eq!((seen[MINUTES - 1], seen.iter().sum::<u64>()), (2, 2), "the slot starts again");
        assert_eq!(h.total(), 6);
    }

    /// Counts over two hours and more, a few in each minute: every one is
    /// in the total, and the hour holds just the last 60 minutes'.
    #[test]
    fn counts_add_up_over_hours() {
        let clock = ManualClock::new(1_700_000_012_345);
        let h = Hour::default();
        let mut added = Vec::new();
        for m in 0..150u64 {
            let n = m % 7;
            for i in 0..n {
                if i % 2 == 0 {
                    h.add_owned(minute_of(clock.now()));
                } else {
                    h.add_shared(minute_of(clock.now()));
                }
            }
            added.push(n);
            clock.advance(std::time::Duration::from_secs(60));
        }
        clock.set(clock.now() - 60_000);
        assert_eq!(h.total(), added.iter().sum::<u64>());
        assert_eq!(hour(&h, &clock).to_vec(), added[added.len() - MINUTES..].to_vec());
    }

    /// A clock before a full hour since the epoch (a test's) reads only the
    /// minutes there are.
    #[test]
    fn the_first_hour_after_the_epoch() {
        let clock = ManualClock::new(90_000);
        let h = Hour::default();
        h.add_owned(minute_of(clock.now()));
        h.add_owned(0);
        let seen = hour(&h, &clock);
        assert_eq!(&seen[MINUTES - 2..], &[1, 1]);
        assert_eq!(seen.iter().sum::<u64>(), 2);
    }
}
