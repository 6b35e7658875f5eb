//! The memory store's background sweeper: expired entries go every
//! `SWEEP_EVERY`, and sooner (at most once a second) when the store nears
//! its bound, shard by shard so no lock is held long. After each sweep what
//! is held is what is live, so the 80% warning is judged then, on live
//! entries. It holds the store only weakly, and the store stops it when
//! dropped. A store made outside a tokio runtime has none.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::Inner;

/// How often the sweeper runs unasked.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The least time between two sweeps asked for by a store nearing its bound.
const SOONEST: Duration = Duration::from_secs(1);

/// Starts the sweeper of `store` on the current runtime, if there is one.
pub(super) fn spawn(store: Weak<Inner>, wake: Arc<Notify>) -> Option<tokio::task::AbortHandle> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let task = runtime.spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(SWEEP_EVERY) => {}
                () = wake.notified() => {}
            }
            let Some(inner) = store.upgrade() else { return };
            let removed = inner.sweep(inner.clock.now());
            inner.bound.note_fill();
            tracing::debug!(kind = crate::log::Kind::Swept.as_str(), removed, "memory store swept");
            drop(inner);
            tokio::time::sleep(SOONEST).await;
        }
    });
    Some(task.abort_handle())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::hashed_key::SHARDS;
    use crate::clock::ManualClock;
    use crate::{Entry, MemoryStore, Millis, Write};

    const T0: Millis = 1_700_000_000_000;

    /// A sweep under way never hides the expiry of the entries it has yet to
    /// reach: a full store's request that meets it still finds them expired,
    /// and makes its room from them. The sweep is held at its first shard
    /// (the test holds that shard's lock), with the store's expired entries
    /// all in the last shard, so the request runs while the sweep is under way.
    #[test]
    fn a_sweep_under_way_leaves_expired_entries_in_sight() {
        let clock = ManualClock::new(T0);
        // Made outside a runtime: no background sweeper, only the sweep below.
        let store = MemoryStore::with_clock(4, Arc::new(clock.clone()));
        let inner = &store.inner;
        let in_shard = |prefix: &'static str, wanted: fn(usize) -> bool| {
            (0..).map(move |i| format!("{prefix}{i}")).filter(move |k| wanted(inner.keys.locate(k).shard))
        };
        let put = |key: &str, ttl: Millis| {
            inner.update(&[key], &mut |_: &[Option<Entry>], now: Millis| {
                vec![Write::Put(Entry { value: 1.into(), expires_at: now + ttl })]
            })
        };
        for key in in_shard("old", |s| s == SHARDS - 1).take(4) {
            put(&key, 1_000).unwrap();
        }
        clock.advance(Duration::from_secs(2));
        let new = in_shard("new", |s| s != 0 && s != SHARDS - 1).next().unwrap();

        let first = inner.shards[0].lock();
        let sweep = std::thread::spawn({
            let store = store.clone();
            move || store.inner.sweep(store.inner.clock.now())
        });
        while inner.sweeps.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let counted = put(&new, 60_000);
        drop(first);
        let swept = sweep.join().unwrap();
        counted.expect("room made from the expired entries the sweep had not reached yet");
        assert_eq!(swept, 0, "the request had removed them before the sweep reached them");
        assert_eq!(store.inner.bound.held(), 1);
    }
}
