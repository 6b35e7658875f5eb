//! The accept loop: at most `max_connections` connections open at once (past
//! it, new ones wait in the listen queue until one closes), each served on
//! a task of its own; at shutdown, no new connection is taken, and those
//! open finish their requests in flight for at most `shutdown_grace`.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use super::connection::connection;
use limit_store::config::ServeSettings;

use limit_store::log::Kind;

/// How long to wait before accepting again after an accept fails.
const AFTER_ACCEPT_ERROR: Duration = Duration::from_millis(100);
/// The least time between two warnings of one kind.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` until `shutdown` resolves, then drains.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    settings: &ServeSettings,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let places = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut shutdown = pin!(shutdown);
    let (mut full_logged, mut failed_logged) = (None, None);
    loop {
        let place = match places.clone().try_acquire_owned() {
            Ok(place) => place,
            Err(_) => {
                if due(&mut full_logged) {
                    tracing::warn!(
                        kind = Kind::ConnectionsFull.as_str(),
                        max_connections = settings.max_connections,
                        "every connection place is taken: new connections wait until one closes (serve.max_connections)"
                    );
                }
                tokio::select! {
                    place = places.clone().acquire_owned() => place.expect("the places are never closed"),
                    () = &mut shutdown => break,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    if due(&mut failed_logged) {
                        tracing::warn!(kind = Kind::AcceptFailed.as_str(), %error, "accepting a connection failed");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(AFTER_ACCEPT_ERROR) => continue,
                        () = &mut shutdown => break,
                    }
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
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

/// True at most once per [`LOG_EVERY`], for the line last written at `last`.
fn due(last: &mut Option<Instant>) -> bool {
    if last.is_some_and(|at| at.elapsed() < LOG_EVERY) {
        return false;
    }
    *last = Some(Instant::now());
    true
}
