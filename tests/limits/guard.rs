//! The guard's settings on `Limits`: the deadline and the in-flight cap from
//! the builder and from `limit-store.toml`, and a store guarded once.

use std::sync::Arc;
use std::time::Duration;

use limit_store::config::Config;
use limit_store::error::Unavailable;
use limit_store::{Apply, Entry, Guarded, LimitStore, Limits, MemoryStore, StoreError};

/// A store whose updates never finish.
struct Stuck(MemoryStore);

#[async_trait::async_trait]
impl LimitStore for Stuck {
    fn shared(&self) -> bool {
        true
    }
    async fn update(&self, _: &[&str], _: &mut Apply<'_>) -> Result<(), StoreError> {
        std::future::pending().await
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.0.read(keys).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

fn stuck() -> Arc<Stuck> {
    Arc::new(Stuck(MemoryStore::new()))
}

async fn api(limits: &Limits, client: &str) -> (Option<Unavailable>, Duration) {
    let started = tokio::time::Instant::now();
    let d = limits.attempt("api", &[("client", client)]).await.unwrap();
    (d.degraded, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn the_builders_deadline_and_cap_apply() {
    let limits =
        Limits::builder().store(stuck()).deadline(Duration::from_millis(100)).max_in_flight(2).build().unwrap();
    for client in ["a", "b"] {
        assert_eq!(api(&limits, client).await, (Some(Unavailable::Timeout), Duration::from_millis(100)));
    }
    // Both calls still hold their places: the third is refused at once.
    assert_eq!(api(&limits, "c").await, (Some(Unavailable::Overloaded), Duration::ZERO));
}

#[tokio::test(start_paused = true)]
async fn the_files_deadline_and_cap_apply() {
    let config = Config::parse("[rate_limit]\ndeadline = \"250ms\"\nmax_in_flight = 1\n").unwrap();
    assert_eq!(config.deadline, Some(Duration::from_millis(250)));
    assert_eq!(config.max_in_flight, Some(1));
    let limits = config.apply(Limits::builder().store(stuck())).build().unwrap();
    assert_eq!(api(&limits, "a").await, (Some(Unavailable::Timeout), Duration::from_millis(250)));
    assert_eq!(api(&limits, "b").await, (Some(Unavailable::Overloaded), Duration::ZERO));
}

#[test]
fn a_bad_deadline_in_the_file_names_its_key_and_line() {
    let err = Config::parse("[rate_limit]\n\ndeadline = \"soon\"\n").unwrap_err();
    assert_eq!(err.line, Some(3));
    assert_eq!(err.key.as_deref(), Some("rate_limit.deadline"));
    assert!(err.message.contains("not a deadline"), "{err}");
    let err = Config::parse("[rate_limit]\nmax_in_flight = 0\n").unwrap_err();
    assert_eq!(err.key.as_deref(), Some("rate_limit.max_in_flight"), "{err}");
}

#[tokio::test(start_paused = true)]
async fn a_guarded_store_is_not_guarded_again() {
    let own = Arc::new(Guarded::with_limits(stuck(), Duration::from_millis(300), 1));
    let limits = Limits::builder().store(own.clone()).deadline(Duration::from_millis(50)).build().unwrap();
    // Its own deadline answers, not the builder's: no second guard in front.
    assert_eq!(api(&limits, "a").await, (Some(Unavailable::Timeout), Duration::from_millis(300)));
    assert_eq!(own.in_flight(), 1);
    assert_eq!(api(&limits, "b").await, (Some(Unavailable::Overloaded), Duration::ZERO));
}
