//! What several test files share: capturing the log lines a test causes, and
//! the database tests' servers and stores.
#![allow(dead_code)]

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
pub mod db;

use std::io::Write;
use std::sync::{Arc, Mutex};

/// The formatted log lines written while the guard lives, on this thread.
pub struct Logs {
    buf: Arc<Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
}

impl Logs {
    /// Every captured line whose `kind` field is `kind`.
    pub fn lines_of_kind(&self, kind: &str) -> Vec<String> {
        let text = String::from_utf8(self.buf.lock().unwrap().clone()).unwrap();
        let needle = format!("kind=\"{kind}\"");
        text.lines().filter(|l| l.contains(&needle)).map(str::to_owned).collect()
    }
}

#[derive(Clone)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Captures log lines on this thread (use a current-thread runtime).
pub fn capture_logs() -> Logs {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Sink(buf.clone());
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    Logs { buf, _guard: tracing::subscriber::set_default(subscriber) }
}
