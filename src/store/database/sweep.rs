//! The background sweeper: at start and every 5 minutes, expired rows of every
//! generation go, in batches small enough never to hold long locks. It holds
//! the store only weakly, and the store aborts it when dropped.

use std::sync::Weak;
use std::time::Duration;

use super::Shared;

/// Rows one sweep statement removes at most.
pub(super) const BATCH: i64 = 1_000;

pub(super) fn spawn(store: Weak<Shared>, every: Duration) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        loop {
            let Some(shared) = store.upgrade() else { return };
            match shared.sweep().await {
                Ok(removed) => tracing::debug!(removed, "limit store swept"),
                Err(e) => tracing::warn!(kind = "limit-store-sweep-failed", error = %e, "limit store sweep failed; retrying at the next interval"),
            }
            drop(shared);
            tokio::time::sleep(every).await;
        }
    })
    .abort_handle()
}
