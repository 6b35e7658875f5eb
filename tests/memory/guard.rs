//! `Guarded`: every call answered within the deadline, the in-flight slot held
//! until the store really finishes, a late `apply` counting nothing, and the
//! unavailable log line at most once a minute per reason.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use limit_store::config::Config;
use limit_store::error::Unavailable;
use limit_store::{Apply, Entry, Guarded, LimitStore, Limits, MemoryStore, Millis, StoreError, Write};
use serde_json::json;
use tokio::sync::Semaphore;

/// A store that is slow on purpose: each call waits for a permit of `gate`
/// (or for `delay`), then runs on a memory store.
struct SlowStore {
    inner: MemoryStore,
    gate: Arc<Semaphore>,
    delay: Duration,
    reached: AtomicUsize,
    finished: AtomicUsize,
}

impl SlowStore {
    fn gated() -> Arc<Self> {
        Arc::new(SlowStore {
            inner: MemoryStore::new(),
            gate: Arc::new(Semaphore::new(0)),
            delay: Duration::ZERO,
            reached: AtomicUsize::new(0),
            finished: AtomicUsize::new(0),
        })
    }

    fn delayed(delay: Duration) -> Arc<Self> {
        let store = SlowStore::gated();
        store.gate.add_permits(Semaphore::MAX_PERMITS / 2);
        Arc::new(SlowStore { delay, ..Arc::into_inner(store).unwrap() })
    }

    async fn wait(&self) {
        self.reached.fetch_add(1, Ordering::SeqCst);
        self.gate.acquire().await.unwrap().forget();
        tokio::time::sleep(self.delay).await;
    }
}

#[async_trait::async_trait]
impl LimitStore for SlowStore {
    fn shared(&self) -> bool {
        false
    }
    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.wait().await;
        let result = self.inner.update(keys, apply).await;
        self.finished.fetch_add(1, Ordering::SeqCst);
        result
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.wait().await;
        self.inner.read(keys).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.wait().await;
        self.inner.sweep().await
    }
}

/// An update that counts one on `key`, recording each run of its `apply`.
async fn count_one(store: &dyn LimitStore, key: &str, runs: &AtomicUsize) -> Result<(), StoreError> {
    store
        .update(&[key], &mut |cur: &[Option<Entry>], now: Millis| {
            runs.fetch_add(1, Ordering::SeqCst);
            let n = cur[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0) + 1;
            vec![Write::Put(Entry { value: json!({ "n": n }), expires_at: now + 60_000 })]
        })
        .await
}

async fn wait_until_idle<S: LimitStore + ?Sized>(guard: &Guarded<S>) {
    for _ in 0..500 {
        if guard.in_flight() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the guard still has {} calls in flight", guard.in_flight());
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_is_answered_unavailable_at_the_deadline() {
    let slow = SlowStore::delayed(Duration::from_secs(30));
    let guard = Guarded::new(slow.clone());
    let started = tokio::time::Instant::now();
    let runs = AtomicUsize::new(0);
    let err = count_one(&guard, "k", &runs).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Timeout, .. }), "{err}");
    assert_eq!(started.elapsed(), Duration::from_secs(2), "answered at the 2 s default deadline");
    let err = guard.read(&["k"]).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Timeout, .. }));
    let err = guard.sweep().await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Timeout, .. }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_keeps_its_slot_until_the_store_finishes() {
    let slow = SlowStore::gated();
    let guard = Guarded::with_limits(slow.clone(), Duration::from_millis(50), 2);
    let runs = AtomicUsize::new(0);
    for key in ["a", "b"] {
        let err = count_one(&guard, key, &runs).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Timeout, .. }));
    }
    assert_eq!(guard.in_flight(), 2, "both timed-out calls still hold their slots");
    // Past the cap: answered at once, without reaching the store.
    let err = count_one(&guard, "c", &runs).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Overloaded, .. }), "{err}");
    assert!(matches!(
        guard.read(&["c"]).await.unwrap_err(),
        limit_store::StoreError::Unavailable { reason: Unavailable::Overloaded, .. }
    ));
    assert_eq!(slow.reached.load(Ordering::SeqCst), 2, "the refused calls never reached the store");
    // The store catches up: the slots come back, and calls reach it again.
    slow.gate.add_permits(2);
    wait_until_idle(&guard).await;
    assert_eq!(slow.finished.load(Ordering::SeqCst), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the late calls never ran the callers' apply");
    slow.gate.add_permits(1);
    count_one(&guard, "d", &runs).await.expect("the store answers again");
    assert_eq!(slow.reached.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_call_counts_nothing() {
    let slow = SlowStore::delayed(Duration::from_millis(300));
    let guard = Guarded::with_limits(slow.clone(), Duration::from_millis(50), 64);
    let runs = AtomicUsize::new(0);
    let err = count_one(&guard, "late", &runs).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Unavailable { .. }));
    wait_until_idle(&guard).await;
    assert_eq!(slow.finished.load(Ordering::SeqCst), 1, "the store did finish the call");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "apply is not run after the caller returned");
    assert_eq!(slow.inner.read(&["late"]).await.unwrap(), vec![None], "and nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_stops_waiting_is_safe_and_counts_nothing() {
    let slow = SlowStore::delayed(Duration::from_millis(200));
    let guard = Guarded::new(slow.clone());
    let runs = AtomicUsize::new(0);
    {
        let mut captured = vec![0u8; 1024]; // state the caller's apply borrows
        let mut apply = |cur: &[Option<Entry>], now: Millis| {
            captured[0] += 1;
            runs.fetch_add(1, Ordering::SeqCst);
            vec![Write::Put(Entry { value: json!(captured.len()), expires_at: now + 60_000 }); cur.len()]
        };
        tokio::select! {
            _ = guard.update(&["dropped"], &mut apply) => panic!("the store answered before the caller gave up"),
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
        // The update future is dropped here; `captured` goes right after.
    }
    wait_until_idle(&guard).await;
    assert_eq!(slow.finished.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(slow.inner.read(&["dropped"]).await.unwrap(), vec![None]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_within_the_deadline_counts() {
    let slow = SlowStore::delayed(Duration::from_millis(30));
    let guard = Guarded::new(slow.clone());
    let runs = AtomicUsize::new(0);
    count_one(&guard, "k", &runs).await.unwrap();
    count_one(&guard, "k", &runs).await.unwrap();
    let got = guard.read(&["k"]).await.unwrap();
    assert_eq!(got[0].as_ref().unwrap().value, json!({"n": 2}));
    assert_eq!(guard.in_flight(), 0);
}

#[tokio::test]
async fn refused_input_passes_through_as_refused() {
    let guard = Guarded::new(Arc::new(MemoryStore::new()));
    let err = guard.read(&[]).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Refused(_)), "{err}");
    let err =
        guard.update(&["a", "a"], &mut |c: &[Option<Entry>], _: Millis| vec![Write::Keep; c.len()]).await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Refused(_)), "{err}");
    assert_eq!(guard.in_flight(), 0);
}

/// A store whose own code fails or panics.
struct Failing {
    panics: bool,
}

#[async_trait::async_trait]
impl LimitStore for Failing {
    fn shared(&self) -> bool {
        true
    }
    async fn update(&self, _: &[&str], _: &mut Apply<'_>) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        if self.panics {
            panic!("the store's own code panics on purpose");
        }
        Err(refused())
    }
    async fn read(&self, _: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        if self.panics {
            panic!("the store's own code panics on purpose");
        }
        Err(refused())
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_or_panicking_store_is_unavailable_and_frees_its_slot() {
    for panics in [false, true] {
        let guard = Guarded::new(Arc::new(Failing { panics }));
        let runs = AtomicUsize::new(0);
        let err = count_one(&guard, "k", &runs).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::StoreFailed, .. }), "{err}");
        let err = guard.read(&["k"]).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::StoreFailed, .. }), "{err}");
        wait_until_idle(&guard).await;
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn unavailable_is_logged_once_a_minute_per_reason() {
    let logs = crate::common::capture_logs();
    let slow = SlowStore::gated();
    let guard = Guarded::with_limits(slow.clone(), Duration::from_millis(10), 3);
    let runs = AtomicUsize::new(0);
    for i in 0..6 {
        let _ = count_one(&guard, &format!("k{i}"), &runs).await;
    }
    let lines = logs.lines_of_kind("limit-store-unavailable");
    assert_eq!(lines.len(), 2, "one timeout line and one overloaded line: {lines:#?}");
    assert!(lines[0].contains("timeout") && lines[1].contains("overloaded"), "{lines:#?}");
    slow.gate.add_permits(10);
}

/// A store that answers at once, here and now, and whose `update_now` panics.
struct PanicsNow;

#[async_trait::async_trait]
impl LimitStore for PanicsNow {
    fn shared(&self) -> bool {
        false
    }
    fn answers_at_once(&self) -> bool {
        true
    }
    fn update_now(&self, _: &[&str], _: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
        panic!("the store's own code panics on purpose");
    }
    async fn update(&self, _: &[&str], _: &mut Apply<'_>) -> Result<(), StoreError> {
        unreachable!("a caller with update_now on offer takes it");
    }
    async fn read(&self, _: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        Ok(vec![None])
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[test]
fn a_store_panicking_here_and_now_is_unavailable_and_needs_no_runtime() {
    let guard = Guarded::new(Arc::new(PanicsNow));
    let mut apply = |current: &[Option<Entry>], _: Millis| vec![Write::Keep; current.len()];
    let answer = guard.update_now(&["k"], &mut apply).expect("the guard offers the inner store's path");
    assert!(matches!(
        answer.unwrap_err(),
        limit_store::StoreError::Unavailable { reason: Unavailable::StoreFailed, .. }
    ));
    // Through the async call too, polled once without a runtime.
    let updated = futures_util::FutureExt::now_or_never(guard.update(&["k"], &mut apply)).expect("answered at once");
    assert!(matches!(
        updated.unwrap_err(),
        limit_store::StoreError::Unavailable { reason: Unavailable::StoreFailed, .. }
    ));
    assert_eq!(guard.in_flight(), 0);
}

#[test]
fn the_memory_store_counts_here_and_now_through_the_guard() {
    let guard = Guarded::new(Arc::new(MemoryStore::new()));
    let mut apply = |current: &[Option<Entry>], now: Millis| {
        let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
        vec![Write::Put(Entry { value: json!(n + 1), expires_at: now + 60_000 })]
    };
    for _ in 0..3 {
        guard.update_now(&["k"], &mut apply).expect("offered").unwrap();
    }
    let read = futures_util::FutureExt::now_or_never(guard.read(&["k"])).expect("answered at once").unwrap();
    assert_eq!(read[0].as_ref().map(|e| e.value.clone()), Some(json!(3)));
}

/// The longest deadline `Guarded::with_limits` documents: one hour.
const MAX_DEADLINE: Duration = Duration::from_secs(3600);
/// The shortest deadline `Guarded::with_limits` documents: 1 ms.
const MIN_DEADLINE: Duration = Duration::from_millis(1);

/// Every place that takes a deadline takes any `Duration`, and never
/// panics: a deadline past `MAX_DEADLINE` (one hour) is taken as it, one
/// under `MIN_DEADLINE` (zero) as it, on every path of a call.
#[tokio::test(start_paused = true)]
async fn a_deadline_of_any_length_is_taken_within_its_bounds() {
    // The longest deadline the file can write ("213503982334d").
    let longest = Config::parse("[rate_limit]\ndeadline = \"213503982334d\"\n").unwrap().deadline.unwrap();
    let a_minute = Duration::from_secs(60);
    for (given, taken) in
        [(Duration::MAX, MAX_DEADLINE), (longest, MAX_DEADLINE), (Duration::ZERO, MIN_DEADLINE), (a_minute, a_minute)]
    {
        let slow = || SlowStore::delayed(MAX_DEADLINE * 2);
        let guard = Guarded::with_limits(slow(), given, 4);
        let started = tokio::time::Instant::now();
        let err = count_one(&guard, "k", &AtomicUsize::new(0)).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { reason: Unavailable::Timeout, .. }), "{given:?}: {err}");
        assert_eq!(started.elapsed(), taken, "{given:?}");
        let started = tokio::time::Instant::now();
        let keep = |current: &[Option<Entry>], _: Millis| vec![Write::Keep; current.len()];
        let err = guard.update_owned(&["k"], Box::new(keep)).await.unwrap_err();
        assert!(matches!(err, StoreError::Unavailable { reason: Unavailable::Timeout, .. }), "{given:?}: {err}");
        assert_eq!(started.elapsed(), taken, "{given:?}");
        // Limits, set in code and in the file's settings.
        let mut config = Config::default();
        config.deadline = Some(given);
        for builder in [Limits::builder().deadline(given), config.apply(Limits::builder())] {
            let limits = builder.store(slow()).single_instance(true).build().unwrap();
            let started = tokio::time::Instant::now();
            let d = limits.attempt("sign-in", &[("account", "a@example.com"), ("ip", "192.0.2.1")]).await.unwrap();
            assert_eq!((d.allowed, d.degraded), (false, Some(Unavailable::Timeout)), "{given:?}: sign-in denies");
            assert_eq!(started.elapsed(), taken, "{given:?}");
        }
        // A store that answers at once answers, whatever the deadline.
        let guard = Guarded::with_limits(Arc::new(MemoryStore::new()), given, 4);
        count_one(&guard, "k", &AtomicUsize::new(0)).await.unwrap();
    }
}

/// The store failing: unavailable, with the underlying error kept.
fn refused() -> StoreError {
    StoreError::Unavailable {
        reason: Unavailable::StoreFailed,
        detail: "connection refused".into(),
        source: Some(Box::new(std::io::Error::other("refused"))),
    }
}
