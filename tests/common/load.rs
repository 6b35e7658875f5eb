//! Load through an outage: 16 tasks, each counting its own key through one
//! store, each keeping how many of its calls were acknowledged and how many
//! failed, and how long its slowest call took; then what the outage must not
//! have broken.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use limit_store::{update_with, Entry, Guarded, LimitStore, StoreError, Write};
use serde_json::json;

/// Tasks counting at once, one key each.
pub const TASKS: usize = 16;
/// Acknowledged calls each task makes after the server is back.
const AFTER_BACK: u64 = 5;
/// The answer every call must get within, served or not.
const ANSWERED_WITHIN: Duration = Duration::from_millis(2_500);

/// What one task did.
#[derive(Debug)]
pub struct Tally {
    pub key: String,
    pub acked: u64,
    pub failed: u64,
    /// Calls acknowledged that began after the server was back.
    pub acked_after_back: u64,
    pub slowest: Duration,
}

/// Adds one to the count under `key`; answers the new count.
pub async fn add_one(store: &dyn LimitStore, key: &str) -> Result<u64, StoreError> {
    update_with(store, &[key], |current, now| {
        let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
        let expires_at = current[0].as_ref().map_or(now + 600_000, |e| e.expires_at);
        (vec![Write::Put(Entry { value: json!({ "n": n }), expires_at })], n)
    })
    .await
}

/// The tasks, counting until told the server is back and then until each has
/// counted [`AFTER_BACK`] more times (or 20 s have passed).
pub struct Load {
    back: Arc<OnceLock<Instant>>,
    tasks: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Load {
    /// Starts the tasks on `store`, with keys under `prefix`.
    pub fn start(store: Arc<dyn LimitStore>, prefix: &str) -> Load {
        let back = Arc::new(OnceLock::new());
        let tasks = (0..TASKS)
            .map(|t| {
                let (store, back) = (store.clone(), back.clone());
                let key = format!("{prefix}-{t}");
                tokio::spawn(async move {
                    let mut tally = Tally { key, acked: 0, failed: 0, acked_after_back: 0, slowest: Duration::ZERO };
                    loop {
                        let back_at: Option<Instant> = back.get().copied();
                        if back_at
                            .is_some_and(|at| tally.acked_after_back >= AFTER_BACK || at.elapsed().as_secs() >= 20)
                        {
                            return tally;
                        }
                        let began = Instant::now();
                        match add_one(&*store, &tally.key).await {
                            Ok(_) => {
                                tally.acked += 1;
                                tally.acked_after_back += u64::from(back_at.is_some());
                            }
                            Err(e) => {
                                assert!(matches!(e, limit_store::StoreError::Unavailable { .. }), "{}: {e}", tally.key);
                                tally.failed += 1;
                            }
                        }
                        tally.slowest = tally.slowest.max(began.elapsed());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
            })
            .collect();
        Load { back, tasks }
    }

    /// Says the server is back: each task counts a few more times, then stops.
    pub fn server_is_back(&self) {
        let _ = self.back.set(Instant::now());
    }

    /// Waits for every task to stop; what each did.
    pub async fn finish(self) -> Vec<Tally> {
        let mut tallies = Vec::new();
        for task in self.tasks {
            tallies.push(task.await.expect("a counting task"));
        }
        tallies
    }
}

/// What an outage must leave true: every call was answered within 2.5 s;
/// counting resumed on the same store; and every key's count is at least its
/// acknowledged calls (each was stored) and at most acknowledged plus failed
/// (a failed call may have been stored).
pub async fn check_after_outage(store: &Guarded, tallies: &[Tally]) {
    assert!(tallies.iter().map(|t| t.failed).sum::<u64>() > 0, "the outage was felt: {tallies:#?}");
    // A call answered unavailable may still be finishing in the store.
    let began = Instant::now();
    while store.in_flight() > 0 {
        assert!(began.elapsed() < Duration::from_secs(30), "{} calls still in flight", store.in_flight());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for tally in tallies {
        let key = &tally.key;
        assert!(tally.slowest <= ANSWERED_WITHIN, "{key}: a call was answered after {:?}", tally.slowest);
        assert!(tally.acked_after_back >= AFTER_BACK, "{key}: counting did not resume: {tally:?}");
        let read = store.read(&[key]).await.expect("a read once the server is back");
        let stored = read[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
        assert!(
            (tally.acked..=tally.acked + tally.failed).contains(&stored),
            "{key}: stored {stored}, acknowledged {}, failed {}",
            tally.acked,
            tally.failed
        );
    }
    let (acked, failed): (u64, u64) = tallies.iter().fold((0, 0), |(a, f), t| (a + t.acked, f + t.failed));
    let slowest = tallies.iter().map(|t| t.slowest).max().unwrap_or_default();
    eprintln!("outage: {acked} calls acknowledged, {failed} failed, the slowest answered in {slowest:?}");
}
