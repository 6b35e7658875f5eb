//! Sweeping and the bound's estimate: a walk over this generation's keys with
//! `SCAN` (on a cluster, on every primary), in the background: counting only at start and near the bound, and
//! removing what expired every 5 minutes.
//!
//! Redis drops an entry itself at its expiry plus a short grace
//! ([`DEFAULT_GRACE`](super::DEFAULT_GRACE)); in the grace the entry is already dead to every
//! read and count, which judge expiry on Redis's clock. A sweep removes the
//! expired entries still in their grace and says how many; with no grace it
//! finds none and answers 0.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use super::family::{tag_in, Tag};
use super::{failed, RedisStore, Shared};
use crate::bound::Refresh;
use crate::StoreError;

/// How often the count runs after the one at start.
pub const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Keys one `SCAN` step looks at (and one sweep script gets): small enough
/// that a step holds the server for about a millisecond.
const SCAN_STEP: usize = 1_000;

impl Shared {
    /// Walks this generation's keys with `SCAN … MATCH`; with `remove`, the
    /// expired ones Redis still holds (within their grace) go. Answers the
    /// live keys (in all, and per family tag) and the removed ones.
    async fn walk(&self, remove: bool) -> Result<(Census, u64), StoreError> {
        let mut conn = self.link.conn();
        let mut cluster = self.link.cluster();
        // On a cluster, every primary's keys in turn (each holds its slots').
        let nodes = match &mut cluster {
            Some(cluster) => super::cluster::primaries(cluster).await.map_err(failed)?.into_iter().map(Some).collect(),
            None => vec![None],
        };
        let pattern = format!("{}*", glob_escape(&self.names));
        let (mut live, mut removed) = (0u64, 0u64);
        let mut by_tag: HashMap<Tag, u64> = HashMap::new();
        for node in &nodes {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(SCAN_STEP);
                let (next, keys): (u64, Vec<Vec<u8>>) = match (node, &mut cluster) {
                    (Some(node), Some(cluster)) => super::cluster::on(cluster, node, &scan)
                        .await
                        .and_then(|v| redis::from_redis_value(v).map_err(redis::RedisError::from))
                        .map_err(failed)?,
                    _ => scan.query_async(&mut conn).await.map_err(failed)?,
                };
                let gone = if remove && !keys.is_empty() {
                    super::cluster::sweep(self, cluster.is_some(), &keys).await.map_err(failed)?
                } else {
                    0
                };
                for key in &keys {
                    if let Some(tag) = tag_in(key, &self.names) {
                        *by_tag.entry(tag).or_default() += 1;
                    }
                }
                live += (keys.len() as u64).saturating_sub(gone);
                removed += gone;
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok((Census { live, by_tag }, removed))
    }

    /// This generation's keys Redis holds (expired ones within their grace
    /// included), counted with `SCAN`.
    pub(super) async fn count_live(&self) -> Result<u64, StoreError> {
        Ok(self.walk(false).await?.0.live)
    }

    /// Starts a count for the bound: keep the answer for [`Self::counted`].
    fn begin_count(&self) -> CountStart {
        CountStart { at: self.bound.begin_refresh(), written: self.families.written() }
    }

    /// Sets the bound's count, in all and per family, from `census`.
    fn counted(&self, start: &CountStart, census: &Census) {
        self.bound.refresh(start.at, census.live);
        self.families.attribute(self.bound.counts(), &census.by_tag, &start.written);
    }

    /// Counts this generation's keys for the bound, in all and per family.
    async fn count_for_bound(&self) -> Result<(), StoreError> {
        let start = self.begin_count();
        let (census, _) = self.walk(false).await?;
        self.counted(&start, &census);
        Ok(())
    }

    /// One sweep: the expired entries Redis still holds go (Redis drops the
    /// rest itself), and the bound's count is made exact.
    pub(super) async fn sweep(&self) -> Result<u64, StoreError> {
        let start = self.begin_count();
        let (census, removed) = self.walk(true).await?;
        self.counted(&start, &census);
        let live = census.live;
        self.bound.note_sweep(removed);
        tracing::debug!(
            kind = crate::log::Kind::Swept.as_str(),
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
            let start = shared.begin_count();
            let census = shared.walk(false).await.ok().map(|(census, _)| census);
            if let Some(census) = &census {
                shared.families.attribute(shared.bound.counts(), &census.by_tag, &start.written);
            }
            shared.bound.refreshed(start.at, census.map(|c| c.live));
        });
    }
}

/// This generation's keys as one walk counted them.
pub(super) struct Census {
    live: u64,
    /// Keys per family tag.
    by_tag: HashMap<Tag, u64>,
}

/// Where a count for the bound began: the bound's, and each family's writes.
struct CountStart {
    at: Refresh,
    written: Vec<u64>,
}

/// Counts the entries for the bound at once, then sweeps every `every`,
/// holding the store only weakly; the store aborts it when dropped.
pub(super) fn spawn(store: Weak<Shared>, every: Option<Duration>) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        if let Some(shared) = store.upgrade() {
            match shared.count_for_bound().await {
                Ok(()) => {}
                Err(e) => tracing::warn!(kind = crate::log::Kind::SweepFailed.as_str(), error = %e, "counting the Redis store's entries at start failed; the bound counts only this instance's new keys until the next count"),
            }
        }
        let Some(every) = every else { return };
        loop {
            tokio::time::sleep(every).await;
            let Some(shared) = store.upgrade() else { return };
            if let Err(e) = shared.sweep().await {
                tracing::warn!(kind = crate::log::Kind::SweepFailed.as_str(), error = %e, "sweeping the Redis store failed; retrying at the next interval");
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
