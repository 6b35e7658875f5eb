//! The guard's rules on a store's [integer counts](crate::IntegerCounts).
//!
//! - **Here and now** (a store that answers at once): its counts never wait,
//!   so the deadline and the in-flight cap have nothing to act on (as for
//!   its `update_now`). A panic is answered unavailable, not carried into
//!   the caller, and an unavailable answer is logged, once a minute per
//!   reason, as any call's is.
//! - **Through a future** (a store that waits): as an owned update, a count
//!   takes an in-flight place, runs in the caller's task, and is handed to a
//!   task of its own if the caller stops waiting or the deadline passes
//!   (`handoff.rs`); the caller is then answered unavailable. A count has
//!   no `apply` to gate: the store writes it whole or not at all.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;

use super::call_guard::{log, CallGuard, Logs};
use super::Guarded;
use crate::error::Unavailable;
use crate::{AsyncIntegerCounter, GcraCounted, GcraStep, IntegerCounter, IntegerCounts, LimitStore, StoreError};

impl<S: LimitStore + ?Sized + 'static> IntegerCounts for Guarded<S> {
    fn counter(&self, prefix: &str) -> Option<Box<dyn IntegerCounter>> {
        if !self.inner.answers_at_once() {
            return None;
        }
        let inner = self.inner.integer_counts()?.counter(prefix)?;
        Some(Box::new(GuardedCounter { inner, logs: self.guard.logs.clone() }))
    }

    fn async_counter(&self, prefix: &str) -> Option<Box<dyn AsyncIntegerCounter>> {
        let inner = self.inner.integer_counts()?.async_counter(prefix)?;
        Some(Box::new(GuardedAsyncCounter { guard: self.guard.clone(), inner: Arc::from(inner) }))
    }
}

/// The inner store's counter, under the guard's rules.
struct GuardedCounter {
    inner: Box<dyn IntegerCounter>,
    logs: Arc<Logs>,
}

impl IntegerCounter for GuardedCounter {
    fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        let error = match catch_unwind(AssertUnwindSafe(|| self.inner.count(rest, step))) {
            // What was counted, on its own: the usual answer moves no error's room.
            Ok(Ok(counted)) => return Ok(counted),
            Ok(Err(e)) => e,
            Err(_panic) => failed("the store call panicked"),
        };
        log(&self.logs, &error);
        Err(error)
    }
}

/// The inner store's counter through a future, under the guard's rules:
/// the guard's deadline, cap and logs, shared with the store's guard.
struct GuardedAsyncCounter {
    guard: CallGuard,
    inner: Arc<dyn AsyncIntegerCounter>,
}

impl AsyncIntegerCounter for GuardedAsyncCounter {
    fn count<'a>(
        &'a self,
        rest: &'a str,
        step: GcraStep,
    ) -> Pin<Box<dyn Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>> {
        let (inner, rest) = (self.inner.clone(), rest.to_owned());
        Box::pin(self.guard.call(async move { inner.count(&rest, step).await }))
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
        Apply, AsyncIntegerCounter, Entry, GcraCounted, GcraStep, Guarded, IntegerCounter, IntegerCounts, LimitStore,
        MemoryStore, StoreError,
    };

    /// A memory store whose integer counter panics on the key `"panics"`,
    /// and, when it answers through futures (`waits`), never answers on
    /// `"slow"`; it offers here and now counts only when it does not wait.
    struct Failing {
        memory: MemoryStore,
        waits: bool,
    }

    #[async_trait::async_trait]
    impl LimitStore for Failing {
        fn shared(&self) -> bool {
            false
        }
        fn answers_at_once(&self) -> bool {
            !self.waits
        }
        fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
            Some(self)
        }
        async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
            self.memory.update(keys, apply).await
        }
        async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
            self.memory.read(keys).await
        }
        async fn sweep(&self) -> Result<u64, StoreError> {
            self.memory.sweep().await
        }
    }

    impl IntegerCounts for Failing {
        fn counter(&self, prefix: &str) -> Option<Box<dyn IntegerCounter>> {
            Some(Box::new(FailingCounter(self.memory.counter(prefix).filter(|_| !self.waits)?)))
        }
        fn async_counter(&self, prefix: &str) -> Option<Box<dyn AsyncIntegerCounter>> {
            Some(Box::new(FailingCounter(self.memory.counter(prefix).filter(|_| self.waits)?)))
        }
    }

    struct FailingCounter(Box<dyn IntegerCounter>);

    impl IntegerCounter for FailingCounter {
        fn count(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
            assert_ne!(rest, "panics", "a store that panics");
            self.0.count(rest, step)
        }
    }

    type Counting<'a> =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>>;

    impl AsyncIntegerCounter for FailingCounter {
        fn count<'a>(&'a self, rest: &'a str, step: GcraStep) -> Counting<'a> {
            Box::pin(async move {
                tokio::task::yield_now().await;
                if rest == "slow" {
                    std::future::pending::<()>().await;
                }
                IntegerCounter::count(self, rest, step)
            })
        }
    }

    /// The guard offers a store's integer counts, and a store that panics
    /// is answered unavailable; a full store's answer comes back as it is.
    #[tokio::test]
    async fn a_guarded_count_answers_a_panic_unavailable() {
        let store = Arc::new(Failing { memory: MemoryStore::with_max_entries(1), waits: false });
        let guarded = Guarded::new(store.clone());
        let counter =
            guarded.integer_counts().expect("offered for a store that answers at once").counter("l:p:").unwrap();
        let step = GcraStep::new(10, 60_000, 1);
        assert!(counter.count("a", step).unwrap().allowed);
        let panicked = counter.count("panics", step).unwrap_err();
        assert_eq!(panicked.unavailable_reason(), Some(Unavailable::StoreFailed));
        let full = counter.count("b", step).unwrap_err();
        assert_eq!(full.unavailable_reason(), Some(Unavailable::Full));
    }

    /// Through a future, a guarded count keeps the guard's rules: a panic
    /// is answered unavailable, a count past the deadline is answered in
    /// time, and it holds its in-flight place while it still runs, so that
    /// past the cap a count is answered overloaded without reaching the store.
    #[tokio::test]
    async fn a_guarded_count_through_a_future_keeps_the_deadline_and_the_cap() {
        let store = Arc::new(Failing { memory: MemoryStore::new(), waits: true });
        let guarded = Guarded::with_limits(store, std::time::Duration::from_millis(100), 1);
        let counts = guarded.integer_counts().expect("offered for a store that waits");
        assert!(counts.counter("l:p:").is_none(), "nothing here and now for a store that waits");
        let counter = counts.async_counter("l:p:").unwrap();
        let step = GcraStep::new(10, 60_000, 1);
        assert!(counter.count("a", step).await.unwrap().allowed);
        let panicked = counter.count("panics", step).await.unwrap_err();
        assert_eq!(panicked.unavailable_reason(), Some(Unavailable::StoreFailed));
        let started = std::time::Instant::now();
        let late = counter.count("slow", step).await.unwrap_err();
        assert_eq!(late.unavailable_reason(), Some(Unavailable::Timeout));
        assert!(started.elapsed() < std::time::Duration::from_secs(2), "answered at the deadline");
        assert_eq!(guarded.in_flight(), 1, "the late count still runs, in its place");
        let over = counter.count("a", step).await.unwrap_err();
        assert_eq!(over.unavailable_reason(), Some(Unavailable::Overloaded));
    }
}
