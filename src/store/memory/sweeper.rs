//! The memory store's background sweeper: expired entries go every
//! [`SWEEP_EVERY`], and sooner (at most once a second) when the store nears
//! its bound, shard by shard so no lock is held long. After each sweep what
//! is held is what is live, so the 80% warning is judged then, on live
//! entries. It holds the store only weakly, and the store stops it when
//! dropped. A store made outside a tokio runtime has none.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::Inner;

/// How often the sweeper runs unasked.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

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
            tracing::debug!(removed, "memory store swept");
            drop(inner);
            tokio::time::sleep(SOONEST).await;
        }
    });
    Some(task.abort_handle())
}
