//! The background sweeper: at start and every 5 minutes, expired rows of every
//! generation go, in batches small enough never to hold long locks. It holds
//! the store only weakly, and the store aborts it when dropped.
//!
//! An expired row takes the room of a live one until it is swept, so with
//! windows as long as the interval the table would hold twice its live rows.
//! When many rows are about to expire (a tenth of the live ones within a
//! fifth of the interval), the next sweep comes after that fifth instead.

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
                Ok(removed) => tracing::debug!(kind = crate::log::Kind::Swept.as_str(), removed, "limit store swept"),
                Err(e) => tracing::warn!(kind = crate::log::Kind::SweepFailed.as_str(), error = %e, "limit store sweep failed; retrying at the next interval"),
            }
            let next = next_sweep_in(&shared, every).await;
            drop(shared);
            tokio::time::sleep(next).await;
        }
    })
    .abort_handle()
}

/// How long until the next sweep: `every`, or a fifth of it when at least a
/// tenth of the live rows expire within that fifth (or the count fails).
async fn next_sweep_in(shared: &Shared, every: Duration) -> Duration {
    let soon = every / 5;
    let within_ms = i64::try_from(soon.as_millis()).unwrap_or(i64::MAX);
    match shared.expiring(within_ms).await {
        Ok(expiring) if expiring > 0 && expiring.saturating_mul(10) >= shared.bound.estimate() => soon,
        _ => every,
    }
}
