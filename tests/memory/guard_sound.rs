//! `Guarded` in safe Rust: a caller may leak its call's future with
//! `mem::forget` after one poll and then free everything its `apply`
//! borrowed; the call that goes on in the store must never reach it, and must
//! write nothing. A store that answers at once runs in the caller's task.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use limit_store::{Apply, Entry, Guarded, LimitStore, MemoryStore, Millis, StoreError, Write};
use serde_json::json;

/// Sleeps before every call, then runs it on a memory store.
struct Sleepy {
    inner: MemoryStore,
    delay: Duration,
    finished: AtomicUsize,
}

#[async_trait::async_trait]
impl LimitStore for Sleepy {
    fn shared(&self) -> bool {
        false
    }
    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        tokio::time::sleep(self.delay).await;
        let result = self.inner.update(keys, apply).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        result
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.inner.read(keys).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.inner.sweep().await
    }
}

fn sleepy(delay: Duration) -> Arc<Sleepy> {
    Arc::new(Sleepy { inner: MemoryStore::new(), delay, finished: AtomicUsize::new(0) })
}

/// Polls `future` once, as a caller that then walks away would.
fn poll_once<F: Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..300 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("waited 3 s for {what}");
}

/// The program of the report, as a test: poll once, forget the future, free
/// what `apply` borrows, and let the store's call go on.
async fn leak_a_borrowing_update(guard: &Guarded<Sleepy>, key: &str) {
    let mut borrowed = vec![7u8; 64 * 1024];
    let mut apply = |current: &[Option<Entry>], now: Millis| {
        borrowed[0] = borrowed[0].wrapping_add(1);
        vec![Write::Put(Entry { value: json!(borrowed.len()), expires_at: now + 60_000 }); current.len()]
    };
    let keys = [key];
    let mut call = Box::pin(guard.update(&keys, &mut apply));
    assert!(poll_once(call.as_mut()).is_pending(), "the store sleeps first");
    std::mem::forget(call);
    #[allow(clippy::drop_non_drop)] // the point: the closure and what it borrows go
    drop(apply);
    drop(borrowed);
    // Reuse the freed memory, so a call that reached it would see garbage.
    let _reuse = vec![0xAAu8; 64 * 1024];
}

async fn a_leaked_borrowing_update_reaches_nothing_and_writes_nothing() {
    let store = sleepy(Duration::from_millis(200));
    let guard = Guarded::with_limits(store.clone(), Duration::from_millis(300), 64);
    leak_a_borrowing_update(&guard, "leaked").await;
    assert_eq!(guard.in_flight(), 1);
    wait_for("the store to finish the leaked call", || store.finished.load(Ordering::SeqCst) == 1).await;
    wait_for("the leaked call's slot", || guard.in_flight() == 0).await;
    assert_eq!(store.inner.read(&["leaked"]).await.unwrap(), vec![None], "the leaked call wrote nothing");
    // The guard goes on counting.
    let runs = AtomicUsize::new(0);
    guard
        .update(&["after"], &mut |c: &[Option<Entry>], now: Millis| {
            runs.fetch_add(1, Ordering::SeqCst);
            vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 }); c.len()]
        })
        .await
        .unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_update_is_sound_on_a_multi_thread_runtime() {
    a_leaked_borrowing_update_reaches_nothing_and_writes_nothing().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_leaked_update_is_sound_on_a_current_thread_runtime() {
    a_leaked_borrowing_update_reaches_nothing_and_writes_nothing().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_owned_update_writes_nothing() {
    let store = sleepy(Duration::from_millis(200));
    let guard = Guarded::with_limits(store.clone(), Duration::from_millis(100), 64);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let apply = move |current: &[Option<Entry>], now: Millis| {
        counted.fetch_add(1, Ordering::SeqCst);
        vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 }); current.len()]
    };
    let keys = ["leaked"];
    let mut call = Box::pin(guard.update_owned(&keys, Box::new(apply)));
    assert!(poll_once(call.as_mut()).is_pending());
    std::mem::forget(call);
    wait_for("the store to finish the leaked call", || store.finished.load(Ordering::SeqCst) == 1).await;
    wait_for("the leaked call's slot", || guard.in_flight() == 0).await;
    assert_eq!(runs.load(Ordering::SeqCst), 0, "apply is not run past the deadline");
    assert_eq!(store.inner.read(&["leaked"]).await.unwrap(), vec![None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_owned_update_writes_nothing() {
    let store = sleepy(Duration::from_millis(200));
    let guard = Guarded::with_limits(store.clone(), Duration::from_millis(50), 64);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let apply = move |current: &[Option<Entry>], now: Millis| {
        counted.fetch_add(1, Ordering::SeqCst);
        vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 }); current.len()]
    };
    let err = guard.update_owned(&["late"], Box::new(apply)).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { .. }), "{err}");
    wait_for("the late call's slot", || guard.in_flight() == 0).await;
    assert_eq!(store.finished.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(store.inner.read(&["late"]).await.unwrap(), vec![None]);
}

#[test]
fn a_store_that_answers_at_once_runs_in_the_callers_task() {
    // No runtime at all: a call that spawned, or set a timer, could not finish.
    let guard = Guarded::new(Arc::new(MemoryStore::new()));
    let mut seen = Vec::new();
    let done = guard
        .update(&["k"], &mut |current: &[Option<Entry>], now: Millis| {
            seen.push(current[0].clone());
            vec![Write::Put(Entry { value: json!(1), expires_at: now + 60_000 })]
        })
        .now_or_never();
    assert!(matches!(done, Some(Ok(()))), "{done:?}");
    assert_eq!(seen, vec![None], "the caller's own apply ran once");
    let read = guard.read(&["k"]).now_or_never().unwrap().unwrap();
    assert_eq!(read[0].as_ref().unwrap().value, json!(1));
    let owned = guard.update_owned(&["k"], Box::new(|c: &[Option<Entry>], _| vec![Write::Delete; c.len()]));
    assert!(matches!(owned.now_or_never(), Some(Ok(()))));
    assert_eq!(guard.in_flight(), 0);
}
