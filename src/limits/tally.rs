//! A count of answers that every thread adds to on the hot path without
//! sharing a cache line, and, for the threads that own one, without a locked
//! instruction: each of the first [`OWNED`] threads alive at once owns a
//! stripe (the same one in every tally) and adds to it with a plain load and
//! store, since no other thread writes it; a thread past them adds with an
//! atomic compare-and-swap to the one shared stripe. A read sums them. One
//! shared atomic would bounce between the cores on every attempt, and a
//! `fetch_add` on a thread's own line still costs a locked instruction (a
//! full barrier). Each stripe is an [`Hour`]: the count, a minute at a time,
//! so the tally also gives its last hour (the status page's chart) at the
//! cost of the one word it adds to.

use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::CachePadded;

use super::minutes::{minute_of, Hour, MINUTES};
use crate::Millis;

/// Stripes owned by one thread each: more than the cores of most hosts that
/// count in memory. A thread that ends gives its stripe back (its count stays).
const OWNED: usize = 16;
/// The stripe that threads without one of their own share.
const SHARED: usize = OWNED;

/// A counter added to by many threads, read rarely.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    stripes: [CachePadded<Hour>; OWNED + 1],
}

impl Tally {
    /// Adds one at `now` (the store's clock), on this thread's stripe.
    #[inline]
    pub(crate) fn add_one(&self, now: Millis) {
        let minute = minute_of(now);
        match owned_stripe() {
            // Only this thread writes stripe `i` while it owns it.
            Some(i) => self.stripes[i].add_owned(minute),
            None => self.stripes[SHARED].add_shared(minute),
        }
    }

    /// The sum over every stripe.
    pub(crate) fn total(&self) -> u64 {
        self.stripes.iter().map(|s| s.total()).fold(0, u64::wrapping_add)
    }

    /// The counts of the hour that ends with the minute of `now`, a minute
    /// each, oldest first.
    pub(crate) fn last_hour(&self, now: Millis) -> [u64; MINUTES] {
        let mut hour = [0; MINUTES];
        for stripe in &self.stripes {
            stripe.add_hour_to(minute_of(now), &mut hour);
        }
        hour
    }
}

/// Which of the [`OWNED`] stripes threads own now, a bit each.
static CLAIMED: AtomicU32 = AtomicU32::new(0);
const _: () = assert!(OWNED <= 32);

/// A thread's claim on a stripe, given back when the thread ends.
struct Owner(Option<usize>);

impl Owner {
    /// The first stripe no thread owns, if any.
    fn claim() -> Self {
        Owner(claim_in(&CLAIMED))
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            release_in(&CLAIMED, i);
        }
    }
}

/// Claims the first stripe free in `claimed`, if any.
fn claim_in(claimed: &AtomicU32) -> Option<usize> {
    let mut now = claimed.load(Ordering::Relaxed);
    loop {
        let free = (!now).trailing_zeros() as usize;
        if free >= OWNED {
            return None;
        }
        // Acquire: this thread's first store follows the last owner's last.
        match claimed.compare_exchange_weak(now, now | 1 << free, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => return Some(free),
            Err(seen) => now = seen,
        }
    }
}

/// Gives stripe `i` back to `claimed`.
fn release_in(claimed: &AtomicU32, i: usize) {
    // Release: the next owner's first load sees this thread's last store.
    claimed.fetch_and(!(1 << i), Ordering::Release);
}

/// The stripe this thread owns; `None` when every one is owned, or while
/// the thread ends.
#[inline]
fn owned_stripe() -> Option<usize> {
    thread_local! {
        static OWNER: Owner = Owner::claim();
    }
    OWNER.try_with(|owner| owner.0).ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// More threads than stripes, some ending while others count, over 17
    /// minutes: every count is kept, whether added on an owned stripe, the
    /// shared one, or a stripe an ended thread gave back.
    #[test]
    fn counts_from_many_threads_add_up() {
        let tally = Tally::default();
        for _ in 0..3 {
            std::thread::scope(|scope| {
                for _ in 0..(OWNED + 3) {
                    scope.spawn(|| {
                        for i in 0..1_000 {
                            tally.add_one(1_700_000_000_000 + i * 1_000);
                        }
                    });
                }
            });
        }
        assert_eq!(tally.total(), 3 * 1_000 * (OWNED as u64 + 3));
        let hour = tally.last_hour(1_700_000_000_000 + 999_000);
        assert_eq!(hour.iter().sum::<u64>(), tally.total(), "17 minutes of counts, all in the hour");
    }

    /// Each of the first threads gets a stripe of its own, the next none,
    /// and a stripe given back goes to the next thread that asks.
    #[test]
    fn stripes_are_owned_once_and_given_back() {
        let claimed = AtomicU32::new(0);
        let owned: Vec<usize> = (0..OWNED).filter_map(|_| claim_in(&claimed)).collect();
        assert_eq!(owned, (0..OWNED).collect::<Vec<_>>());
        assert_eq!(claim_in(&claimed), None, "past the owned stripes, threads share one");
        release_in(&claimed, 5);
        assert_eq!(claim_in(&claimed), Some(5));
        assert_eq!(claim_in(&claimed), None);
    }
}
