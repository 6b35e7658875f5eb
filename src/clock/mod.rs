//! The clock a store judges expiry by. In-process stores read [`SystemClock`],
//! except the memory store, whose entries only this process judges: it reads
//! a cheaper steady clock of its own (the wall clock's time at its start,
//! moved on by a monotonic counter, never a call into the OS per read). Tests inject a [`ManualClock`] and move time
//! by hand instead of sleeping.

use std::fmt::Debug;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Millis;

mod steady;

pub(crate) use steady::SteadyClock;

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
