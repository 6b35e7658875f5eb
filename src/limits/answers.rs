//! What one limit answered, tallied: the figures behind [`LimitCounters`].
//! Limits a reload builds take them over from the limits they replace, by
//! name ([`LimitsBuilder::counters_from`](super::LimitsBuilder::counters_from)),
//! so the figures since start survive a change of budgets.

use std::sync::atomic::{AtomicU64, Ordering};

use super::decision::LimitCounters;
use super::last_hour::LastHour;
use super::minutes::{minute_of, minute_start, MINUTES};
use super::tally::Tally;
use crate::Millis;

/// The tallies of one limit's answers.
#[derive(Debug, Default)]
pub(super) struct Answers {
    pub(super) allowed: Tally,
    pub(super) limited: Tally,
    pub(super) degraded: AtomicU64,
    pub(super) shadow_refused: AtomicU64,
}

impl Answers {
    /// The figures now.
    pub(super) fn counters(&self) -> LimitCounters {
        LimitCounters {
            allowed: self.allowed.total(),
            limited: self.limited.total(),
            degraded: self.degraded.load(Ordering::Relaxed),
            shadow_refused: self.shadow_refused.load(Ordering::Relaxed),
        }
    }

    /// The hour that ends with the minute of `now`.
    pub(super) fn last_hour(&self, now: Millis) -> LastHour {
        let first = minute_of(now).saturating_sub(MINUTES as u64 - 1);
        LastHour {
            first_minute: minute_start(first),
            allowed: self.allowed.last_hour(now),
            limited: self.limited.last_hour(now),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::clock::{Clock, SystemClock};
    use crate::{Limits, MemoryStore};

    /// Limits built `counters_from` earlier ones carry on each limit's
    /// figures (and its last hour) by name, and answers given on either
    /// count in both.
    #[tokio::test]
    async fn limits_built_again_carry_on_the_counters() {
        let store = Arc::new(MemoryStore::new());
        let parts = [("account", "ada@example.com"), ("ip", "192.0.2.7")];
        let first = Limits::builder().store(store.clone()).single_instance(true).build().unwrap();
        for _ in 0..6 {
            first.attempt("sign-in", &parts).await.unwrap();
        }
        let second = Limits::builder()
            .store(store.clone())
            .single_instance(true)
            .budget("sign-in", "account", 10)
            .counters_from(&first)
            .build()
            .unwrap();
        let counted = second.counters("sign-in").unwrap();
        assert_eq!((counted.allowed, counted.limited), (5, 1));
        second.attempt("sign-in", &parts).await.unwrap();
        first.attempt("api", &[("client", "c-1")]).await.unwrap();
        assert_eq!(second.counters("sign-in").unwrap().allowed, 6);
        assert_eq!(first.counters("sign-in").unwrap().allowed, 6, "one tally behind both");
        assert_eq!(second.counters("api").unwrap().allowed, 1);
        let now = SystemClock.now();
        let hour = second.last_hour("sign-in", now).unwrap();
        assert_eq!((hour.allowed_total(), hour.limited_total()), (6, 1), "the last hour carries on too");
        assert_eq!(first.last_hour("sign-in", now), Some(hour));
        let fresh = Limits::builder().store(store).single_instance(true).build().unwrap();
        assert_eq!(fresh.counters("sign-in").unwrap().allowed, 0, "without counters_from, from zero");
    }

    /// A check (cost 0) counts nothing, so it is no answer tallied, allowed
    /// or limited: on the memory store's GCRA path (`api`), a limit of two
    /// parts (`sign-in`), and one of one part counted as JSON (`code-verify`).
    #[tokio::test]
    async fn a_check_of_cost_0_is_tallied_as_no_answer() {
        let limits = Limits::builder().store(Arc::new(MemoryStore::new())).single_instance(true).build().unwrap();
        let sign_in = [("account", "ada@example.com"), ("ip", "192.0.2.7")];
        let code = [("code", "c-1")];
        for _ in 0..3 {
            assert!(limits.attempt_cost("api", &[("client", "c-1")], 0).await.unwrap().allowed);
            assert!(limits.attempt_cost("sign-in", &sign_in, 0).await.unwrap().allowed);
            assert!(limits.attempt_cost("code-verify", &code, 0).await.unwrap().allowed);
        }
        while limits.attempt("sign-in", &sign_in).await.unwrap().allowed {}
        assert!(!limits.attempt_cost("sign-in", &sign_in, 0).await.unwrap().allowed, "a check that would be refused");
        let now = SystemClock.now();
        for (name, allowed, limited) in [("api", 0, 0), ("sign-in", 5, 1), ("code-verify", 0, 0)] {
            let counted = limits.counters(name).unwrap();
            assert_eq!((counted.allowed, counted.limited), (allowed, limited), "{name}");
            let hour = limits.last_hour(name, now).unwrap();
            assert_eq!((hour.allowed_total(), hour.limited_total()), (allowed, limited), "{name}'s last hour");
        }
    }
}
