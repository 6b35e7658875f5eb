//! The accept loop: at most `max_connections` connections open at once,
//! counting the gRPC port's (past it, new ones wait in the listen queue
//! until one closes), each served on
//! a task of its own; at shutdown, no new connection is taken, and those
//! open finish their requests in flight for at most `shutdown_grace`.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connection::connection;
use limit_store::config::ServeSettings;

use limit_store::log::Kind;

/// How long to wait before accepting again after an accept fails.
const AFTER_ACCEPT_ERROR: Duration = Duration::from_millis(100);
/// The least time between two warnings of one kind.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `shutdown` resolves, then drains.
/// Each connection holds one of `places` (`max_connections` of them,
/// shared with the gRPC port) while it is open.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    settings: &ServeSettings,
    places: Arc<Semaphore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    let mut accepting = Accepting::new(places.clone(), settings.max_connections, "HTTP");
    loop {
        let (stream, place) = tokio::select! {
            next = accepting.next(&listener) => next,
            () = &mut shutdown => break,
        };
        let served = graceful.watch(connection(stream, router.clone(), settings.request_timeout));
        tokio::spawn(async move {
            if let Err(error) = served.await {
                tracing::debug!(kind = Kind::Connection.as_str(), %error, "a connection ended");
            }
            drop(place);
        });
    }
    drop(listener);
    let open = graceful.count();
    tracing::info!(
        kind = Kind::Draining.as_str(),
        open,
        grace_ms = u64::try_from(settings.shutdown_grace.as_millis()).unwrap_or(u64::MAX),
        "no new connections; the requests in flight have the shutdown grace to finish"
    );
    if tokio::time::timeout(settings.shutdown_grace, graceful.shutdown()).await.is_err() {
        tracing::warn!(
            kind = Kind::DrainCut.as_str(),
            open = settings.max_connections.saturating_sub(places.available_permits()),
            "the shutdown grace ran out: the connections still open are closed (serve.shutdown_grace)"
        );
    }
    Ok(())
}

/// The accept loop of one port: each connection it takes holds one of
/// `places` (shared by both ports) until it closes. Its warnings (every
/// place taken, an accept failed) are written at most once a minute each.
pub(crate) struct Accepting {
    places: Arc<Semaphore>,
    max_connections: usize,
    port: &'static str,
    full_logged: Option<Instant>,
    failed_logged: Option<Instant>,
}

impl Accepting {
    /// The loop of `port` (named in its log lines), over `places`.
    pub(crate) fn new(places: Arc<Semaphore>, max_connections: usize, port: &'static str) -> Self {
        Accepting { places, max_connections, port, full_logged: None, failed_logged: None }
    }

    /// The next connection on `listener`, and its place. A connection is
    /// taken first, then waits for a place, so an idle loop holds none;
    /// after a failed accept (no file left), it waits a moment.
    pub(crate) async fn next(&mut self, listener: &TcpListener) -> (TcpStream, OwnedSemaphorePermit) {
        let stream = loop {
            match listener.accept().await {
                Ok((stream, _)) => break stream,
                Err(error) => {
                    if due(&mut self.failed_logged) {
                        tracing::warn!(kind = Kind::AcceptFailed.as_str(), port = self.port, %error, "accepting a connection failed");
                    }
                    tokio::time::sleep(AFTER_ACCEPT_ERROR).await;
                }
            }
        };
        let _ = stream.set_nodelay(true);
        if let Ok(place) = self.places.clone().try_acquire_owned() {
            return (stream, place);
        }
        if due(&mut self.full_logged) {
            tracing::warn!(
                kind = Kind::ConnectionsFull.as_str(),
                max_connections = self.max_connections,
                port = self.port,
                "every connection place is taken: new connections wait until one closes (serve.max_connections)"
            );
        }
        (stream, self.places.clone().acquire_owned().await.expect("the places are never closed"))
    }
}

/// True at most once per [`LOG_EVERY`], for the line last written at `last`.
fn due(last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|at| at.elapsed() < LOG_EVERY) {
        return false;
    }
    *last = Some(Instant::now());
    true
}
