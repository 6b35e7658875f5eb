//! What the test binaries share (each includes this folder as `mod common`):
//! the servers' URLs from the environment, capturing the log lines a test
//! causes, and in the modules below the stores, servers and processes the
//! tests run on.
#![allow(dead_code)]

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod db;
pub mod http;
pub mod load;
#[cfg(feature = "redis")]
pub mod redis;
pub mod relay;
#[cfg(feature = "cli")]
pub mod serve;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod servers;

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex, Once};

/// The URL of a server the tests share, in the variable `var`
/// (`LIMIT_STORE_TEST_POSTGRES`, `_MYSQL`, `_REDIS`), or `None` after saying
/// the test is skipped.
pub fn server(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("{var} is not set: skipping this test (.ci/run sets it)");
            None
        }
    }
}

/// A number no other test of this run is likely to draw: for names of
/// tables, keys and files of a test's own.
pub fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::SystemTime::now())
}

/// The formatted log lines written on this thread while it lives.
pub struct Logs {
    buf: Arc<Mutex<Vec<u8>>>,
}

impl Logs {
    /// Every captured line whose `kind` field is `kind`.
    pub fn lines_of_kind(&self, kind: &str) -> Vec<String> {
        let text = String::from_utf8(self.buf.lock().unwrap().clone()).unwrap();
        let needle = format!("kind=\"{kind}\"");
        text.lines().filter(|l| l.contains(&needle)).map(str::to_owned).collect()
    }
}

impl Drop for Logs {
    fn drop(&mut self) {
        CAPTURE.with(|c| c.borrow_mut().take());
    }
}

thread_local! {
    /// Where this thread's log lines go, while a test captures them.
    static CAPTURE: RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { RefCell::new(None) };
}

/// Writes to the capturing buffer of the thread that logs, if it has one.
struct ThreadSink;

impl Write for ThreadSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(sink) = c.borrow().as_ref() {
                sink.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures log lines on this thread (use a current-thread runtime).
///
/// One global subscriber, set once, routes each line to the thread that wrote
/// it. A subscriber per test (`set_default`) would be simpler, but tracing
/// caches each call site's interest globally: a call site first reached by a
/// test running beside this one, between two subscribers, can stay switched
/// off, and this test would then see no line at all.
pub fn capture_logs() -> Logs {
    static GLOBAL: Once = Once::new();
    GLOBAL.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(|| ThreadSink)
            .with_ansi(false)
            .with_env_filter("warn,limit_store=trace")
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber in tests");
    });
    // A call site registered while the global subscriber was being set may
    // have cached the old answer; ask every call site again.
    tracing::callsite::rebuild_interest_cache();
    let buf = Arc::new(Mutex::new(Vec::new()));
    CAPTURE.with(|c| *c.borrow_mut() = Some(buf.clone()));
    Logs { buf }
}
