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
use crate::{GcraCounted, GcraStep, IntegerCounter, IntegerCounts, LimitStore, StoreError};

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
    fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        let error = match &self.inner {
            Some(inner) => match catch_unwind(AssertUnwindSafe(|| inner.count(rest, step))) {
                // What was counted, on its own: the usual answer moves no error's room.
                Ok(Ok(counted)) => return Ok(counted),
                Ok(Err(e)) => e,
                Err(_panic) => failed("the store call panicked"),
            },
            None => failed("the store offers no integer counts"),
        };
        log(&self.logs, &error);
        Err(error)
    }
}

fn failed(detail: &str) -> StoreError {
    StoreError::Unavailable { reason: Unavailable::StoreFailed, detail: detail.into(), source: None }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::error::Unavailable;
    use crate::{
        Apply, Entry, GcraCounted, GcraStep, Guarded, IntegerCounter, IntegerCounts, LimitStore, MemoryStore,
        StoreError,
    };

    /// A memory store whose integer counter panics on the key `"panics"`.
    struct Panicking(MemoryStore);

    #[async_trait::async_trait]
    impl LimitStore for Panicking {
        fn shared(&self) -> bool {
            false
        }
        fn answers_at_once(&self) -> bool {
            true
        }
        fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
            Some(self)
        }
        async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
            self.0.update(keys, apply).await
        }
        async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
            self.0.read(keys).await
        }
        async fn sweep(&self) -> Result<u64, StoreError> {
            self.0.sweep().await
        }
    }

    impl IntegerCounts for Panicking {
        fn counter(&self, prefix: &str) -> Box<dyn IntegerCounter> {
            Box::new(PanickingCounter(self.0.counter(prefix)))
        }
    }

    struct PanickingCounter(Box<dyn IntegerCounter>);

    impl IntegerCounter for PanickingCounter {
        fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
            assert_ne!(rest, "panics", "a store that panics");
            self.0.count(rest, step)
        }
    }

    /// The guard offers a store's integer counts, and a store that panics
    /// is answered unavailable; a full store's answer comes back as it is.
    #[tokio::test]
    async fn a_guarded_count_answers_a_panic_unavailable() {
        let store = Arc::new(Panicking(MemoryStore::with_max_entries(1)));
        let guarded = Guarded::new(store.clone());
        let counter = guarded.integer_counts().expect("offered for a store that answers at once").counter("l:p:");
        let step = GcraStep::new(10, 60_000, 1);
        assert!(counter.count("a", step).unwrap().allowed);
        let panicked = counter.count("panics", step).unwrap_err();
        assert_eq!(panicked.unavailable_reason(), Some(Unavailable::StoreFailed));
        let full = counter.count("b", step).unwrap_err();
        assert_eq!(full.unavailable_reason(), Some(Unavailable::Full));
    }
}
