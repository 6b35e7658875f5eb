//! The clock a store judges expiry by. In-process stores read [`SystemClock`]
//! (the memory store, whose entries are its own, the cheaper [`SteadyClock`]);
//! tests inject a [`ManualClock`] and move time by hand instead of sleeping.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Millis;

/// A source of the store's `now`, in milliseconds since the Unix epoch.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The current time on this clock.
    fn now(&self) -> Millis;
}

/// The machine's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        // Seconds and the milliseconds within: no 128-bit arithmetic per count.
        Millis::try_from(since.as_secs())
            .ok()
            .and_then(|secs| secs.checked_mul(1_000))
            .and_then(|ms| ms.checked_add(Millis::from(since.subsec_millis())))
            .unwrap_or(Millis::MAX)
    }
}

/// The wall clock read once, then moved on by the machine's monotonic
/// counter: the CPU's time-stamp counter where it is steady (as governor's
/// default clock reads it), else the OS's monotonic clock. A read costs a few
/// nanoseconds and no call into the OS, and never goes back.
///
/// It follows neither a step of the wall clock nor NTP's slewing of it, so it
/// drifts from the wall clock as the counter does (parts per million). That
/// suits the memory store, whose entries only this process judges; a store
/// that processes share judges by one clock for all, so it reads
/// [`SystemClock`] or the server's.
#[derive(Clone, Debug)]
pub struct SteadyClock {
    counter: quanta::Clock,
    /// The counter's reading when the wall clock was read.
    start: u64,
    /// That wall clock reading, in nanoseconds since the Unix epoch.
    start_nanos: u64,
}

impl SteadyClock {
    /// This process's steady clock: every one reads the same time, from the
    /// wall clock's when the first was made.
    pub fn new() -> Self {
        static PROCESS: OnceLock<SteadyClock> = OnceLock::new();
        PROCESS.get_or_init(Self::started).clone()
    }

    fn started() -> Self {
        let counter = quanta::Clock::new();
        let start = counter.raw();
        let wall = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
        SteadyClock { counter, start, start_nanos: u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX) }
    }
}

impl Default for SteadyClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SteadyClock {
    fn now(&self) -> Millis {
        let nanos = self.start_nanos.saturating_add(self.counter.delta_as_nanos(self.start, self.counter.raw()));
        Millis::try_from(nanos / 1_000_000).unwrap_or(Millis::MAX)
    }
}

/// A clock that moves only when told to; clones share one time.
#[derive(Clone, Debug)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now`.
    pub fn new(now: Millis) -> Self {
        ManualClock(Arc::new(AtomicI64::new(now)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = Millis::try_from(by.as_millis()).unwrap_or(Millis::MAX);
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now`.
    pub fn set(&self, now: Millis) {
        self.0.store(now, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_steady_clock_reads_the_wall_clock_and_never_goes_back() {
        let steady = SteadyClock::new();
        let mut last = steady.now();
        for _ in 0..10_000 {
            let now = steady.now();
            assert!(now >= last, "went back from {last} to {now}");
            last = now;
        }
        std::thread::sleep(Duration::from_millis(20));
        let (before, read, after) = (SystemClock.now(), SteadyClock::new().now(), SystemClock.now());
        // Within a few ms of the wall clock: it moved on as the wall clock did.
        assert!(before - 5 <= read && read <= after + 5, "{before} <= {read} <= {after}");
        assert!(read >= last + 20, "20 ms slept: {last} then {read}");
    }
}
