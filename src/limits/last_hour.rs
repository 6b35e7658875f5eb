//! [`LastHour`]: what a limit answered in each minute of the last hour, for
//! a chart (the status page's) or a look at a burst.

use super::minutes::MINUTES;
use crate::Millis;

/// What a limit answered in each of the last 60 minutes, oldest first, the
/// minute of the time asked for last; minutes by the store's clock, as the
/// attempts were counted. Like [`LimitCounters`](super::LimitCounters), kept
/// across a reload that carries the counters on.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LastHour {
    /// The start of the oldest minute, in ms since the Unix epoch.
    pub first_minute: Millis,
    /// Attempts allowed and counted, a minute each.
    pub allowed: [u64; MINUTES],
    /// Attempts refused for lack of budget, a minute each.
    pub limited: [u64; MINUTES],
}

#[cfg(test)]
impl LastHour {
    /// Attempts allowed in the hour.
    pub(crate) fn allowed_total(&self) -> u64 {
        self.allowed.iter().sum()
    }

    /// Attempts refused for lack of budget in the hour.
    pub(crate) fn limited_total(&self) -> u64 {
        self.limited.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::clock::{Clock, ManualClock};
    use crate::{Limits, MemoryStore};

    /// Each attempt lands in the minute of the store's clock when it was
    /// counted, allowed or limited; as the clock moves on, the hour moves
    /// with it and an hour later the minutes are out of it.
    #[tokio::test]
    async fn attempts_land_in_the_minute_the_store_counted_them() {
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Arc::new(MemoryStore::with_clock(1_000, Arc::new(clock.clone())));
        let limits = Limits::builder().store(store).single_instance(true).build().unwrap();
        let ada = [("account", "ada@example.com"), ("ip", "192.0.2.7")];
        for _ in 0..7 {
            limits.attempt("sign-in", &ada).await.unwrap();
        }
        clock.advance(Duration::from_secs(20 * 60));
        limits.attempt("sign-in", &[("account", "bo@example.com"), ("ip", "192.0.2.8")]).await.unwrap();
        let hour = limits.last_hour("sign-in", clock.now()).unwrap();
        assert_eq!((hour.allowed[39], hour.limited[39]), (5, 2), "20 minutes ago: {hour:?}");
        assert_eq!((hour.allowed[59], hour.limited[59]), (1, 0), "this minute: {hour:?}");
        assert_eq!((hour.allowed_total(), hour.limited_total()), (6, 2));
        assert_eq!(hour.first_minute, (1_700_000_000_000 / 60_000 - 39) * 60_000);
        assert_eq!(limits.last_hour("api", clock.now()).unwrap().allowed_total(), 0);

        clock.advance(Duration::from_secs(45 * 60));
        let hour = limits.last_hour("sign-in", clock.now()).unwrap();
        assert_eq!((hour.allowed[14], hour.allowed_total(), hour.limited_total()), (1, 1, 0), "{hour:?}");
        let since_start = limits.counters("sign-in").unwrap();
        assert_eq!((since_start.allowed, since_start.limited), (6, 2), "out of the hour, still counted");
    }
}
