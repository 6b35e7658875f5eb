//! `GET /healthz`'s probe of the store. It reads the store beneath its guard,
//! so a health check never takes an in-flight slot from an attempt; at most
//! one probe runs at once, and its answer is reused for a second, so a flood
//! of health checks costs the store one read a second. A caller waits at
//! most the guard's deadline. The store's own error is logged, never
//! answered: `/healthz` is open without the token.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;

use limit_store::{Guarded, LimitStore};

/// How long a probe's answer is reused.
const REUSE: Duration = Duration::from_secs(1);
/// How long a probe may run before it is dropped and the next one may start:
/// past the guard's deadline, for a store that bounds its own work near it,
/// and short enough that a connection lost for good does not stop probing.
const GIVE_UP: Duration = Duration::from_secs(30);
/// The key a probe reads.
const KEY: &str = "limit-store:health";
use limit_store::log::Kind;

/// The store's health, probed one read at a time.
pub(super) struct Health {
    store: Arc<dyn LimitStore>,
    deadline: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The last probe's answer, and when it came.
    answer: Option<(Instant, bool)>,
    /// The probe running now: when it started, and where its answer comes.
    probe: Option<(Instant, watch::Receiver<Option<bool>>)>,
}

impl Health {
    /// Probes `guarded`'s store beneath the guard, within its deadline.
    pub(super) fn new(guarded: &Guarded) -> Arc<Self> {
        Arc::new(Health {
            store: guarded.inner().clone(),
            deadline: guarded.deadline(),
            state: Mutex::new(State::default()),
        })
    }

    /// True when the store answers: the answer of the last second, or of the
    /// probe running now (started if none is), within the deadline.
    pub(super) async fn answers(self: &Arc<Self>) -> bool {
        let mut waiting = {
            let mut state = self.state.lock();
            if let Some((at, answer)) = state.answer {
                if at.elapsed() < REUSE {
                    return answer;
                }
            }
            match &state.probe {
                // A probe older than the deadline has its answer: not in time.
                Some((started, _)) if started.elapsed() >= self.deadline => return false,
                Some((_, waiting)) => waiting.clone(),
                None => {
                    let (tell, waiting) = watch::channel(None);
                    state.probe = Some((Instant::now(), waiting.clone()));
                    tokio::spawn(self.clone().probe(tell));
                    waiting
                }
            }
        };
        let answer = tokio::time::timeout(self.deadline, waiting.wait_for(Option::is_some)).await;
        matches!(answer, Ok(Ok(answer)) if *answer == Some(true))
    }

    /// One read of the store; its answer is kept for [`REUSE`].
    async fn probe(self: Arc<Self>, tell: watch::Sender<Option<bool>>) {
        let read = tokio::time::timeout(GIVE_UP, self.store.read(&[KEY])).await;
        let failure = match read {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some(format!("no answer within {GIVE_UP:?}")),
        };
        let ok = failure.is_none();
        let was = {
            let mut state = self.state.lock();
            state.probe = None;
            state.answer.replace((Instant::now(), ok)).map(|(_, was)| was)
        };
        match (&failure, was) {
            (Some(error), Some(true) | None) => {
                tracing::warn!(kind = Kind::Health.as_str(), %error, "the store does not answer health checks")
            }
            (None, Some(false)) => {
                tracing::info!(kind = Kind::Health.as_str(), "the store answers health checks again")
            }
            _ => {}
        }
        let _ = tell.send(Some(ok));
    }
}
