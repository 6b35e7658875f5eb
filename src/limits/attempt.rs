//! [`Limits::attempt`] and [`Limits::attempt_cost`], and [`Attempt`], their
//! future. It counts when first polled: on a store that answers at once
//! (the memory store) that poll answers; on any other it counts through the
//! store's own future, boxed.
//!
//! A future of its own, not an `async fn`'s, so that the usual count on the
//! memory store (one value of a limit whose one part is a GCRA) makes its
//! decision where `poll` returns it: the count hands back what its step
//! counted, three words, and the decision is written once. The rule:
//! a decision is built where it is returned, never in a frame it is then
//! copied out of, since reading back what was just written, with wider loads,
//! stalls the CPU (profiled in 84ffa2e and e62dc2c).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::compiled_limit::{CompiledLimit, Given};
use super::decision::Decision;
use super::error::LimitError;
use super::handle::Limits;

/// The future of [`Limits::attempt`] and [`Limits::attempt_cost`]:
/// counts when first polled.
#[must_use = "futures do nothing unless you `.await` or poll them"]
pub struct Attempt<'a> {
    state: State<'a>,
}

/// The limit an attempt names: by its name, found when the attempt is
/// first polled, or found already (a [`LimitHandle`](super::LimitHandle)'s).
#[derive(Clone, Copy)]
pub(super) enum Which<'a> {
    Named(&'a str),
    Found(&'a CompiledLimit),
}

/// The answer of a store that answers through a future.
type Later<'a> = Pin<Box<dyn Future<Output = Result<Decision, LimitError>> + Send + 'a>>;

enum State<'a> {
    /// Not polled yet.
    Start { limits: &'a Limits, which: Which<'a>, parts: &'a [(&'a str, &'a str)], cost: u64 },
    /// Counting through the store's future.
    Later(Later<'a>),
    /// Answered.
    Done,
}

impl std::fmt::Debug for Attempt<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match &self.state {
            State::Start { which, .. } => {
                let name = match which {
                    Which::Named(name) => name,
                    Which::Found(compiled) => compiled.limit.name(),
                };
                format!("not polled yet, on limit {name:?}")
            }
            State::Later(_) => "counting".to_owned(),
            State::Done => "answered".to_owned(),
        };
        f.debug_struct("Attempt").field("state", &state).finish()
    }
}

impl Limits {
    /// Counts one attempt on limit `name` for the given parts, as
    /// `(part, value)` pairs in any order (values are any UTF-8: emails, IPs).
    /// The [`Attempt`] counts when first polled: `.await` it.
    ///
    /// Refused inside [`in_transaction`](crate::in_transaction).
    pub fn attempt<'a>(&'a self, name: &'a str, parts: &'a [(&'a str, &'a str)]) -> Attempt<'a> {
        Attempt::new(self, Which::Named(name), parts, 1)
    }

    /// [`attempt`](Self::attempt) that counts `cost` at once on every part
    /// (an LLM call of 1,200 tokens, a batch of 50 messages): allowed only
    /// when all of it fits on every part, and then counted whole on each; a
    /// refused attempt counts nothing on any part. A cost of 0 is a check:
    /// it answers what an attempt of 1 would, and counts nothing. A cost
    /// over a part's budget can never be allowed: it is
    /// [`LimitError::CostOverBudget`], counting nothing. `attempt` is
    /// `attempt_cost` of 1.
    ///
    /// A limit counted in an earlier-contract [`RateLimitStore`](super::RateLimitStore)
    /// takes only a cost of 1 ([`LimitError::CostNotCounted`]).
    pub fn attempt_cost<'a>(&'a self, name: &'a str, parts: &'a [(&'a str, &'a str)], cost: u64) -> Attempt<'a> {
        Attempt::new(self, Which::Named(name), parts, cost)
    }
}

impl<'a> Attempt<'a> {
    /// An attempt of `cost` on the limit `which` of `limits`, for `parts`, not counted yet.
    pub(super) fn new(limits: &'a Limits, which: Which<'a>, parts: &'a [(&'a str, &'a str)], cost: u64) -> Self {
        Attempt { state: State::Start { limits, which, parts, cost } }
    }
}

impl Future for Attempt<'_> {
    type Output = Result<Decision, LimitError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let State::Start { limits, which, parts, cost } = this.state {
            this.state = State::Done;
            let found = match which {
                Which::Named(name) => limits.found(name),
                Which::Found(compiled) => Ok(compiled),
            };
            let answered = limits.attempt_at_once(found, Given::Parts(parts), cost);
            if answered.is_ready() {
                return answered;
            }
            // An unknown limit was answered above.
            if let Ok(compiled) = found {
                this.state = State::Later(Box::pin(limits.attempt_later(compiled, parts, cost)));
            }
        }
        match &mut this.state {
            State::Later(later) => {
                let answered = later.as_mut().poll(cx);
                if answered.is_ready() {
                    this.state = State::Done;
                }
                answered
            }
            // As an `async fn`'s future: polled again after its answer.
            _ => panic!("`Limits::attempt`'s future polled after it answered"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Limits, MemoryStore};

    const _: () = {
        const fn send<T: Send>() {}
        send::<super::Attempt<'static>>();
    };

    fn api(budget: u64, shadow: bool) -> Limits {
        Limits::builder()
            .store(Arc::new(MemoryStore::new()))
            .single_instance(true)
            .budget("api", "client", budget)
            .shadow("api", shadow)
            .build()
            .unwrap()
    }

    /// An attempt counts when first polled, once: one made and dropped
    /// unpolled takes no budget, and one polled to its answer takes one. On
    /// the usual count's own path (a one-part GCRA on the memory store) a
    /// refusal says when to retry and is tallied, as any refusal is.
    #[tokio::test]
    async fn counts_when_polled_and_only_then() {
        let limits = api(2, false);
        let parts = [("client", "c-1")];
        drop(limits.attempt("api", &parts));
        let first = limits.attempt("api", &parts).await.unwrap();
        assert_eq!((first.allowed, first.remaining), (true, 1), "the dropped attempt took nothing");
        let second = limits.attempt("api", &parts).await.unwrap();
        assert_eq!((second.allowed, second.remaining), (true, 0));
        let refused = limits.attempt("api", &parts).await.unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.limited_by, Some("client"));
        assert!(refused.retry_after.is_some_and(|wait| !wait.is_zero()));
        assert_eq!(limits.counters("api").map(|c| (c.allowed, c.limited)), Some((2, 1)));
    }

    /// The usual count's own path keeps every rule of an attempt: a limit in
    /// shadow mode lets a refusal through, and a count inside a transaction
    /// is refused, counting nothing.
    #[tokio::test]
    async fn the_usual_counts_path_keeps_shadow_mode_and_transactions() {
        let limits = api(1, true);
        let parts = [("client", "c-1")];
        assert!(limits.attempt("api", &parts).await.unwrap().allowed);
        let through = limits.attempt("api", &parts).await.unwrap();
        assert!(through.allowed && through.shadow_refused);
        assert_eq!(through.limited_by, Some("client"));

        let limits = api(1, false);
        let refused = crate::in_transaction(limits.attempt("api", &parts)).await;
        assert!(matches!(refused, Err(crate::LimitError::Store(_))), "{refused:?}");
        assert!(limits.attempt("api", &parts).await.unwrap().allowed, "the refused attempt took nothing");
    }

    /// A count on the usual path that fails (a full store) writes nothing
    /// and is answered once, by the limit's policy, as any failed count is.
    #[tokio::test]
    async fn a_full_store_is_answered_by_the_policy() {
        let store = Arc::new(MemoryStore::with_max_entries(1));
        let limits = Limits::builder().store(store.clone()).single_instance(true).build().unwrap();
        assert!(limits.attempt("api", &[("client", "c-1")]).await.unwrap().degraded.is_none());
        let full = limits.attempt("api", &[("client", "c-2")]).await.unwrap();
        assert_eq!(full.degraded, Some(crate::error::Unavailable::Full));
        assert!(full.allowed, "the api preset lets attempts through when its store is down");
        assert_eq!(limits.counters("api").map(|c| (c.allowed, c.degraded)), Some((1, 1)));
        assert_eq!(crate::LimitStore::stats(&*store).map(|s| s.held), Some(1), "nothing was written");
    }
}
