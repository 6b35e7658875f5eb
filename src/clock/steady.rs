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
        let steady = PROCESS.get_or_init(|| Steady::started(quanta::Clock::new(), wall_nanos()));
        SteadyClock { steady }
    }
}

impl Default for SteadyClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SteadyClock {
    #[inline]
    fn now(&self) -> Millis {
        Millis::try_from(self.steady.nanos(wall_nanos) / 1_000_000).unwrap_or(Millis::MAX)
    }
}

impl Steady {
    /// Counting from `counter`'s reading now, which the wall clock gives as `wall` ns.
    fn started(counter: quanta::Clock, wall: u64) -> Self {
        let start = counter.raw();
        Steady {
            counter,
            start,
            start_nanos: wall,
            correction: AtomicI64::new(0),
            next_check: AtomicU64::new(wall.saturating_add(CHECK_EVERY)),
        }
    }

    /// The time now, in ns since the Unix epoch; `wall` is read only when a
    /// comparison with the wall clock is due.
    #[inline]
    fn nanos(&self, wall: impl FnOnce() -> u64) -> u64 {
        let counted = self.start_nanos.saturating_add(self.counter.delta_as_nanos(self.start, self.counter.raw()));
        let nanos = counted.saturating_add_signed(self.correction.load(Ordering::Relaxed));
        let due = self.next_check.load(Ordering::Relaxed);
        if counted >= due {
            return self.compare_with_wall(due, counted, nanos, wall);
        }
        nanos
    }

    /// [`nanos`](Self::nanos) when a comparison is due: one read a second
    /// (the one that moves `next_check`) looks at the wall clock.
    #[cold]
    #[inline(never)]
    fn compare_with_wall(&self, due: u64, counted: u64, nanos: u64, wall: impl FnOnce() -> u64) -> u64 {
        if self.next_check.compare_exchange(due, counted + CHECK_EVERY, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let moved = step_toward(wall(), nanos);
            self.correction.fetch_add(moved, Ordering::Relaxed);
            return nanos.saturating_add_signed(moved);
        }
        nanos
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
    fn it_follows_the_wall_clock_once_a_second_a_little_at_a_time() {
        const START: u64 = 1_700_000_000_000_000_000;
        let (counter, mock) = quanta::Clock::mock();
        let steady = Steady::started(counter, START);
        let unread = || -> u64 { panic!("the wall clock read before a comparison was due") };
        mock.increment(500_000_000);
        assert_eq!(steady.nanos(unread), START + 500_000_000, "the counter alone, within the second");
        // A second on: the wall clock is 40 µs ahead, and the clock catches up.
        mock.increment(500_000_000);
        assert_eq!(steady.nanos(|| START + 1_000_040_000), START + 1_000_040_000);
        assert_eq!(steady.nanos(unread), START + 1_000_040_000, "kept, and not compared again yet");
        // The wall clock stepped an hour ahead: followed by 0.1 ms a second only.
        mock.increment(1_000_000_000);
        let hour = 3_600_000_000_000;
        assert_eq!(steady.nanos(|| START + 2_000_040_000 + hour), START + 2_000_040_000 + 100_000);
        // Now 0.14 ms ahead of the wall clock: moved back by one step, 0.1 ms.
        mock.increment(1_000_000_000);
        assert_eq!(steady.nanos(|| START + 3_000_000_000), START + 3_000_140_000 - 100_000);
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
