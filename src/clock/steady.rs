//! [`SteadyClock`]: the wall clock's time without a call into the OS per read.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Clock;
use crate::Millis;

/// How often a read compares the clock with the wall clock.
const CHECK_EVERY: u64 = 1_000_000_000;
/// The most a comparison moves the clock, in ns: it follows the wall clock's
/// rate to within 100 parts per million, and never jumps.
const MAX_STEP: i64 = 100_000;

/// The wall clock's time, read from the machine's monotonic counter: the
/// CPU's time-stamp counter where it is steady (as governor's default clock
/// reads it), else the OS's monotonic clock. A read costs a few nanoseconds
/// and no call into the OS.
///
/// Once a second a read compares it with the wall clock and moves it by at
/// most 0.1 ms toward it, so it keeps the wall clock's rate (NTP's, not the
/// counter's own drift) without ever jumping: a step of the wall clock is
/// followed only at that pace, and a reading goes back (by a millisecond) only
/// when such a move crosses one. That suits the memory store, whose entries
/// only this process judges; a store that processes share judges by one
/// clock for all, so it reads [`SystemClock`](super::SystemClock) or the
/// server's. Every `SteadyClock` of a process reads the same time.
#[derive(Clone, Copy, Debug)]
pub struct SteadyClock {
    steady: &'static Steady,
}

#[derive(Debug)]
struct Steady {
    counter: quanta::Clock,
    /// The counter's reading when the wall clock was first read.
    start: u64,
    /// That wall clock reading, in ns since the Unix epoch.
    start_nanos: u64,
    /// Added to the counter's time, in ns: how far it was moved toward the
    /// wall clock.
    correction: AtomicI64,
    /// The counter's time (ns) at which a read next compares it with the wall clock.
    next_check: AtomicU64,
}

impl SteadyClock {
    /// This process's steady clock (the first call reads the wall clock and
    /// calibrates the counter).
    pub fn new() -> Self {
        static PROCESS: OnceLock<Steady> = OnceLock::new();
        let steady = PROCESS.get_or_init(|| {
            let counter = quanta::Clock::new();
            let start = counter.raw();
            let start_nanos = wall_nanos();
            Steady {
                counter,
                start,
                start_nanos,
                correction: AtomicI64::new(0),
                next_check: AtomicU64::new(start_nanos.saturating_add(CHECK_EVERY)),
            }
        });
        SteadyClock { steady }
    }
}

impl Default for SteadyClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> Millis {
        let s = self.steady;
        let counted = s.start_nanos.saturating_add(s.counter.delta_as_nanos(s.start, s.counter.raw()));
        let mut nanos = counted.saturating_add_signed(s.correction.load(Ordering::Relaxed));
        let due = s.next_check.load(Ordering::Relaxed);
        // One read a second (the one that moves `next_check`) looks at the wall clock.
        if counted >= due
            && s.next_check.compare_exchange(due, counted + CHECK_EVERY, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            let moved = step_toward(wall_nanos(), nanos);
            s.correction.fetch_add(moved, Ordering::Relaxed);
            nanos = nanos.saturating_add_signed(moved);
        }
        Millis::try_from(nanos / 1_000_000).unwrap_or(Millis::MAX)
    }
}

/// How far a clock reading `nanos` moves toward the wall clock's `wall`: all
/// the way, up to [`MAX_STEP`] either way.
fn step_toward(wall: u64, nanos: u64) -> i64 {
    let behind = i128::from(wall) - i128::from(nanos);
    i64::try_from(behind.clamp(-i128::from(MAX_STEP), i128::from(MAX_STEP))).unwrap_or(0)
}

/// The wall clock, in ns since the Unix epoch.
fn wall_nanos() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    #[test]
    fn it_reads_the_wall_clock_and_does_not_jump() {
        let steady = SteadyClock::new();
        let mut last = steady.now();
        for _ in 0..10_000 {
            let now = steady.now();
            // Back by a millisecond at most: a step toward a slower wall clock
            // (at most 0.1 ms) can cross one.
            assert!(now + 1 >= last, "went back from {last} to {now}");
            last = now;
        }
        std::thread::sleep(Duration::from_millis(20));
        let (before, read, after) = (SystemClock.now(), SteadyClock::new().now(), SystemClock.now());
        // Within a few ms of the wall clock: it moved on as the wall clock did.
        assert!(before - 5 <= read && read <= after + 5, "{before} <= {read} <= {after}");
        assert!(read >= last + 20, "20 ms slept: {last} then {read}");
    }

    #[test]
    fn it_moves_toward_the_wall_clock_a_little_at_a_time() {
        assert_eq!(step_toward(1_000, 1_000), 0);
        assert_eq!(step_toward(1_050, 1_000), 50, "a small lag is made up at once");
        assert_eq!(step_toward(1_000, 1_050), -50);
        assert_eq!(step_toward(10_000_000_000, 1_000), MAX_STEP, "a step is followed slowly");
        assert_eq!(step_toward(1_000, u64::MAX), -MAX_STEP);
        assert_eq!(step_toward(u64::MAX, 0), MAX_STEP);
    }
}
