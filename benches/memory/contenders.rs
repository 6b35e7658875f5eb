//! The contenders of the memory bench: limit-store's store, guard and
//! `Limits`, and the peers, each counting on the bench's shared keys.

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use limit_store::{Entry, LimitStore, MemoryStore, Millis, Write};

use super::{each_index, keys, KEY_COUNT, MAX_ENTRIES, MAX_ENTRIES_U64, RUNLIMIT_SHARDS, WINDOW_MS};

/// The `apply` of a fixed-window counter: add one to `n`, keep the window's end.
/// The count is kept as `{"n": …}`, the way a limit keeps its state.
fn count(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let n = current[0].as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
    let expires_at = current[0].as_ref().map_or(now + WINDOW_MS, |e| e.expires_at);
    vec![Write::Put(Entry { value: serde_json::json!({ "n": n + 1 }), expires_at })]
}

/// The same counter kept as a bare JSON number: shows what the object costs.
fn count_number(current: &[Option<Entry>], now: Millis) -> Vec<Write> {
    let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
    let expires_at = current[0].as_ref().map_or(now + WINDOW_MS, |e| e.expires_at);
    vec![Write::Put(Entry { value: serde_json::Value::from(n + 1), expires_at })]
}

type CountFn = fn(&[Option<Entry>], Millis) -> Vec<Write>;

/// One rate-limit counter implementation under test.
pub trait Contender: Sync {
    /// Per-thread state built outside the timed region (a runtime, for the guard).
    type Local;
    fn local(&self) -> Self::Local;
    /// Counts `n` requests on keys `start, start + 1, …` (cycling). Panics on any
    /// error or refusal.
    fn run(&self, local: &mut Self::Local, start: usize, n: u64);
}

pub struct Memory {
    store: MemoryStore,
    apply: CountFn,
}

impl Contender for Memory {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        // `update` never awaits for MemoryStore: poll once with a no-op waker,
        // so no executor work is added to the figure.
        let mut cx = Context::from_waker(Waker::noop());
        let mut apply = self.apply;
        each_index(start, n, |i| {
            let key = [keys[i].as_str()];
            let mut update = LimitStore::update(&self.store, &key, &mut apply);
            match update.as_mut().poll(&mut cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => panic!("MemoryStore::update failed: {e}"),
                Poll::Pending => panic!("MemoryStore::update awaited"),
            }
        });
    }
}

/// What a user calls: `limits.attempt("api", &[("client", key)])`, the `api`
/// preset (GCRA) with a budget no run reaches, on a `MemoryStore`.
/// The `{"n": n}` count's `apply` alone, with no store: called on an entry
/// as the store lends it, its answer dropped as the store drops what it
/// does not keep. The floor under `MemoryStore::update` with that `apply`.
pub struct ApplyAlone;

impl Contender for ApplyAlone {
    type Local = Vec<Option<Entry>>;
    fn local(&self) -> Self::Local {
        vec![Some(Entry { value: serde_json::json!({ "n": 1 }), expires_at: Millis::MAX })]
    }
    fn run(&self, current: &mut Self::Local, start: usize, n: u64) {
        each_index(start, n, |i| {
            let now = Millis::try_from(i).unwrap_or(0);
            drop(std::hint::black_box(count(std::hint::black_box(&current[..]), now)));
        });
    }
}

pub struct LimitsAttempt {
    limits: limit_store::Limits,
}

impl LimitsAttempt {
    pub fn new() -> Self {
        let store: Arc<dyn LimitStore> = Arc::new(MemoryStore::with_max_entries(MAX_ENTRIES_U64));
        let limits = limit_store::Limits::builder()
            .store(store)
            .single_instance(true)
            // One attempt a millisecond refilled, an hour's worth at once.
            .budget("api", "client", 3_600_000)
            .window("api", "client", Duration::from_secs(3_600))
            .build()
            .expect("limits");
        Self { limits }
    }
}

impl Contender for LimitsAttempt {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        // The memory store answers at once: one poll with a no-op waker.
        let mut cx = Context::from_waker(Waker::noop());
        each_index(start, n, |i| {
            let parts = [("client", keys[i].as_str())];
            let attempt = std::pin::pin!(self.limits.attempt("api", &parts));
            match attempt.poll(&mut cx) {
                Poll::Ready(Ok(d)) if d.allowed => {}
                Poll::Ready(other) => panic!("Limits::attempt did not allow: {other:?}"),
                Poll::Pending => panic!("Limits::attempt awaited"),
            }
        });
    }
}

pub struct GuardedStore<G> {
    guarded: G,
}

impl<G: LimitStore> Contender for GuardedStore<G> {
    type Local = tokio::runtime::Runtime;
    fn local(&self) -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
    }
    fn run(&self, runtime: &mut tokio::runtime::Runtime, start: usize, n: u64) {
        let keys = keys();
        // One block_on per sample, not per op: the loop awaits each update.
        runtime.block_on(async {
            let mut apply = count;
            let mut i = start;
            for _ in 0..n {
                let key = [keys[i].as_str()];
                if let Err(e) = LimitStore::update(&self.guarded, &key, &mut apply).await {
                    panic!("Guarded<MemoryStore>::update failed: {e}");
                }
                i += 1;
                if i == KEY_COUNT {
                    i = 0;
                }
            }
        });
    }
}

pub struct Governor {
    limiter: governor::DefaultKeyedRateLimiter<String>,
}

impl Governor {
    pub fn new() -> Self {
        // A burst of 10^9 refilled at 1/ns: never refused at any rate reachable here.
        let quota = governor::Quota::per_second(NonZeroU32::new(1_000_000_000).unwrap());
        Self { limiter: governor::RateLimiter::keyed(quota) }
    }
}

impl Contender for Governor {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        each_index(start, n, |i| {
            if self.limiter.check_key(&keys[i]).is_err() {
                panic!("governor refused a check");
            }
        });
    }
}

pub struct Runlimit {
    store: runlimit_memory::MemoryStore,
    policy: runlimit_core::FixedWindowPolicy,
    hasher: runlimit_core::KeyHasher,
    /// `Some`: the subject keys, computed before the run (storage cost only).
    prehashed: Option<Vec<runlimit_core::SubjectKey>>,
}

impl Runlimit {
    pub fn new(prehashed: bool) -> Self {
        let config = runlimit_memory::MemoryStoreConfig::new(MAX_ENTRIES)
            .and_then(|c| c.with_shard_count(RUNLIMIT_SHARDS))
            .expect("runlimit config");
        let policy = runlimit_core::FixedWindowPolicy::new(
            runlimit_core::PolicyId::new("bench.requests").unwrap(),
            runlimit_core::ScopeId::new("client").unwrap(),
            runlimit_core::MAX_LIMIT,
            Duration::from_millis(WINDOW_MS.unsigned_abs()),
        )
        .expect("runlimit policy");
        let hasher = runlimit_core::KeyHasher::new([7u8; 32]).expect("runlimit key hasher");
        let prehashed = prehashed.then(|| keys().iter().map(|k| hasher.hash_for(&policy, k.as_bytes())).collect());
        Self { store: runlimit_memory::MemoryStore::new(config), policy, hasher, prehashed }
    }

    #[inline(always)]
    fn check(&self, subject: runlimit_core::SubjectKey) {
        let decision =
            self.store.check(&runlimit_core::Check::new(&self.policy, subject)).expect("runlimit check failed");
        if !decision.permits_request() {
            panic!("runlimit refused a check");
        }
    }
}

impl Contender for Runlimit {
    type Local = ();
    fn local(&self) {}
    fn run(&self, _: &mut (), start: usize, n: u64) {
        let keys = keys();
        match &self.prehashed {
            Some(subjects) => each_index(start, n, |i| self.check(subjects[i])),
            None => each_index(start, n, |i| self.check(self.hasher.hash_for(&self.policy, keys[i].as_bytes()))),
        }
    }
}

pub fn memory() -> Memory {
    Memory { store: MemoryStore::with_max_entries(MAX_ENTRIES_U64), apply: count }
}

pub fn memory_number() -> Memory {
    Memory { apply: count_number, ..memory() }
}

pub fn guarded() -> GuardedStore<impl LimitStore> {
    GuardedStore { guarded: limit_store::Guarded::new(Arc::new(MemoryStore::with_max_entries(MAX_ENTRIES_U64))) }
}
