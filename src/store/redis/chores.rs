//! Sweeping and the bound's estimate: a walk over this generation's keys with
//! `SCAN`, in the background: counting only at start and near the bound, and
//! removing what expired every 5 minutes.
//!
//! Redis drops an entry itself at its expiry plus a short grace
//! ([`DEFAULT_GRACE`](super::DEFAULT_GRACE)); in the grace the entry is already dead to every
//! read and count, which judge expiry on Redis's clock. A sweep removes the
//! expired entries still in their grace and says how many; with no grace it
//! finds none and answers 0.

use std::sync::Weak;
use std::time::Duration;

use super::{failed, RedisStore, Shared};
use crate::StoreError;

/// How often the count runs after the one at start.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Keys one `SCAN` step looks at (and one sweep script gets): small enough
/// that a step holds the server for about a millisecond.
const SCAN_STEP: usize = 1_000;

impl Shared {
    /// Walks this generation's keys with `SCAN … MATCH`; with `remove`, the
    /// expired ones Redis still holds (within their grace) go. Answers the
    /// live keys and the removed ones.
    async fn walk(&self, remove: bool) -> Result<(u64, u64), StoreError> {
        let mut conn = self.conn.clone();
        let pattern = format!("{}*", glob_escape(&self.names));
        let (mut cursor, mut live, mut removed) = (0u64, 0u64, 0u64);
        loop {
            let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(SCAN_STEP)
                .query_async(&mut conn)
                .await
                .map_err(failed)?;
            let gone = if remove && !keys.is_empty() {
                self.scripts.sweep(&mut conn, &keys).await.map_err(failed)?
            } else {
                0
            };
            live += (keys.len() as u64).saturating_sub(gone);
            removed += gone;
            if next == 0 {
                return Ok((live, removed));
            }
            cursor = next;
        }
    }

    /// This generation's keys Redis holds (expired ones within their grace
    /// included), counted with `SCAN`.
    pub(super) async fn count_live(&self) -> Result<u64, StoreError> {
        Ok(self.walk(false).await?.0)
    }

    /// One sweep: the expired entries Redis still holds go (Redis drops the
    /// rest itself), and the bound's count is made exact.
    pub(super) async fn sweep(&self) -> Result<u64, StoreError> {
        let at = self.bound.begin_refresh();
        let (live, removed) = self.walk(true).await?;
        self.bound.refresh(at, live);
        self.bound.note_sweep(removed);
        tracing::debug!(
            live,
            removed,
            "Redis store swept: expired entries within their grace removed; Redis drops the rest itself"
        );
        Ok(removed)
    }
}

impl RedisStore {
    /// Makes the bound's estimate exact again when it is due, in the
    /// background: no request waits for the count.
    pub(super) fn refresh_bound_if_due(&self) {
        if !self.shared.bound.claim_refresh() {
            return;
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let at = shared.bound.begin_refresh();
            let live = shared.count_live().await.ok();
            shared.bound.refreshed(at, live);
        });
    }
}

/// Counts the entries for the bound at once, then sweeps every `every`,
/// holding the store only weakly; the store aborts it when dropped.
pub(super) fn spawn(store: Weak<Shared>, every: Option<Duration>) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        if let Some(shared) = store.upgrade() {
            let at = shared.bound.begin_refresh();
            match shared.count_live().await {
                Ok(live) => shared.bound.refresh(at, live),
                Err(e) => tracing::warn!(kind = "limit-store-sweep-failed", error = %e, "counting the Redis store's entries at start failed; the bound counts only this instance's new keys until the next count"),
            }
        }
        let Some(every) = every else { return };
        loop {
            tokio::time::sleep(every).await;
            let Some(shared) = store.upgrade() else { return };
            if let Err(e) = shared.sweep().await {
                tracing::warn!(kind = "limit-store-sweep-failed", error = %e, "sweeping the Redis store failed; retrying at the next interval");
            }
        }
    })
    .abort_handle()
}

/// `text` with `SCAN`'s glob characters escaped, so a prefix matches itself.
fn glob_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_prefix_matches_only_itself() {
        assert_eq!(super::glob_escape("a*b?[c]\\:"), "a\\*b\\?\\[c\\]\\\\:");
    }
}
