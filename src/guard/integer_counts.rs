//! The guard's rules on a store's [integer counts](crate::IntegerCounts).
//!
//! Offered only for a store that answers at once: its counts never wait, so
//! the deadline and the in-flight cap have nothing to act on (as for its
//! `update_now`). What the guard still does to each count: a panic is
//! answered unavailable, not carried into the caller, and an unavailable
//! answer is logged, once a minute per reason, as any call's is.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use super::{log, Guarded, Logs};
use crate::error::Unavailable;
use crate::{IntegerCounter, IntegerCounts, IntegerStep, LimitStore, StoreError};

impl<S: LimitStore + ?Sized + 'static> IntegerCounts for Guarded<S> {
    fn counter(&self, prefix: &str) -> Box<dyn IntegerCounter> {
        let inner = self.inner.integer_counts().map(|counts| counts.counter(prefix));
        Box::new(GuardedCounter { inner, logs: self.logs.clone() })
    }
}

/// The inner store's counter, under the guard's rules.
struct GuardedCounter {
    /// `None` for an inner store that offers no integer counts (the guard
    /// then offers none either, so only a caller that kept a counter made
    /// before could meet it).
    inner: Option<Box<dyn IntegerCounter>>,
    logs: Arc<Logs>,
}

impl IntegerCounter for GuardedCounter {
    fn count(&self, rest: &str, step: &mut IntegerStep<'_>) -> Result<(), StoreError> {
        let answer = match &self.inner {
            Some(inner) => match catch_unwind(AssertUnwindSafe(|| inner.count(rest, step))) {
                Ok(answer) => answer,
                Err(_panic) => Err(failed("the store call panicked")),
            },
            None => Err(failed("the store offers no integer counts")),
        };
        if let Err(e) = &answer {
            log(&self.logs, e);
        }
        answer
    }
}

fn failed(detail: &str) -> StoreError {
    StoreError::Unavailable { reason: Unavailable::StoreFailed, detail: detail.into(), source: None }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::{Guarded, LimitStore, MemoryStore};

    /// The guard offers a memory store's integer counts, and a step that
    /// panics is answered unavailable, writing nothing; a full store's
    /// answer comes back as it is.
    #[tokio::test]
    async fn a_guarded_count_answers_a_panic_unavailable() {
        let store = Arc::new(MemoryStore::with_max_entries(1));
        let guarded = Guarded::new(store.clone());
        let counter = guarded.integer_counts().expect("offered for a store that answers at once").counter("l:p:");
        counter.count("a", &mut |_, now| Some((1, now + 60_000))).unwrap();
        let panicked = counter.count("a", &mut |_, _| panic!("a step that panics")).unwrap_err();
        assert_eq!(panicked.unavailable_reason(), Some(crate::error::Unavailable::StoreFailed));
        let read = store.read(&["l:p:a"]).await.unwrap();
        assert_eq!(read[0].as_ref().map(|e| e.value.clone()), Some(serde_json::json!(1)), "nothing was written");
        let full = counter.count("b", &mut |_, now| Some((1, now + 60_000))).unwrap_err();
        assert_eq!(full.unavailable_reason(), Some(crate::error::Unavailable::Full));
    }
}
