//! A count of answers that every thread adds to on the hot path without
//! sharing a cache line: one stripe per thread (threads beyond the stripes
//! share), summed when read. One shared atomic would bounce between the cores
//! on every attempt.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// Stripes per tally: more than the cores of most hosts that count in memory.
const STRIPES: usize = 16;

/// A counter added to by many threads, read rarely.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    stripes: [CachePadded<AtomicU64>; STRIPES],
}

impl Tally {
    /// Adds one, on this thread's stripe.
    pub(crate) fn add_one(&self) {
        self.stripes[stripe()].fetch_add(1, Ordering::Relaxed);
    }

    /// The sum over every stripe.
    pub(crate) fn total(&self) -> u64 {
        self.stripes.iter().map(|s| s.load(Ordering::Relaxed)).fold(0, u64::wrapping_add)
    }
}

/// This thread's stripe, handed out in turn as threads first count.
fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
    }
    STRIPE.with(|s| *s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_many_threads_add_up() {
        let tally = Tally::default();
        std::thread::scope(|scope| {
            for _ in 0..(STRIPES + 3) {
                scope.spawn(|| {
                    for _ in 0..1_000 {
                        tally.add_one();
                    }
                });
            }
        });
        assert_eq!(tally.total(), 1_000 * (STRIPES as u64 + 3));
    }
}
