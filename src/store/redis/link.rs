//! The store's connection to the server it writes to: one multiplexed
//! connection that reconnects by itself, to the URL's server, or to the
//! primary that Sentinel names (`sentinel.rs`); or a cluster connection that
//! routes each call to its slot's primary (`cluster/`). Either way the writes
//! that wait for replicas (`min_replicas_acked`) have connections of their
//! own.
//!
//! With Sentinel the connections are replaced when the primary changes:
//! - a `+switch-master` message from any Sentinel (each is watched on a
//!   connection of its own) names the new primary at once;
//! - a `READONLY` answer (the server became a replica) or a failed call
//!   makes the store ask the Sentinels again (at most every 250 ms).
//!
//! Calls in flight on the old connection finish there or fail (answered
//! unavailable); nothing is retried on the new one, so no count is applied
//! twice. The next counts go to the new primary: counting resumes with no
//! restart.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::{Mutex, RwLock};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;

use super::sentinel::{switched_to, SentinelUrl};
use super::CALL_LIMIT;
use crate::StoreError;

/// The longest connecting (or reconnecting) may take.
const CONNECT_LIMIT: Duration = Duration::from_secs(1);
/// Ask the Sentinels again at most this often.
const ASK_EVERY: Duration = Duration::from_millis(250);
/// Connections for the writes that wait for replicas.
pub(super) const WAITING_CONNS: usize = 8;

/// A connection to one server, or to a cluster.
#[derive(Clone)]
pub(super) enum Conn {
    /// One server (or the primary Sentinel names).
    One(ConnectionManager),
    /// A Redis Cluster: each call goes to its keys' slot's primary.
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::One(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => Box::pin(super::cluster::ask::command(c, cmd)),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::One(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => Box::pin(super::cluster::ask::pipeline(c, pipeline, offset, count)),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::One(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The connection, and how to find the primary again.
pub(super) struct Link {
    conn: RwLock<Conn>,
    /// On a cluster, the connection of one-slot writes: its client never
    /// sends a call again by itself (`cluster/once.rs`).
    once: Option<ClusterConnection>,
    /// When writes wait for replicas (`WAIT`): connections of their own,
    /// taken in turn. A `WAIT` holds its connection until the replicas
    /// answer, and every call behind it there waits too; so each waiting
    /// write goes on the next of these, and as many `WAIT`s are out at once.
    /// A call and its `WAIT` still share one connection, as `WAIT` covers
    /// that connection's writes. Empty when no write waits. On one server
    /// these (replaced when Sentinel names a new primary); on a cluster
    /// `waiting_once`.
    waiting: RwLock<Vec<ConnectionManager>>,
    /// On a cluster, the connections of `waiting`'s rule: built as `once`
    /// is, they send nothing again by themselves (`cluster/once.rs`).
    waiting_once: Vec<ClusterConnection>,
    next_waiting: AtomicUsize,
    /// The URL the connection is on (the primary's, with Sentinel).
    url: Mutex<String>,
    sentinel: Option<SentinelUrl>,
    /// One asking at a time, and when the last began.
    asking: tokio::sync::Mutex<Option<Instant>>,
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("sentinel", &self.sentinel).finish_non_exhaustive()
    }
}

/// A connection manager on `url`, bounded as the store's calls are.
async fn manager(url: &str) -> Result<ConnectionManager, redis::RedisError> {
    let client = redis::Client::open(url)?;
    let config = ConnectionManagerConfig::new()
        .set_response_timeout(Some(CALL_LIMIT))
        .set_connection_timeout(Some(CONNECT_LIMIT))
        .set_number_of_retries(3)
        .set_max_delay(Duration::from_millis(500));
    match tokio::time::timeout(5 * CONNECT_LIMIT, ConnectionManager::new_with_config(client, config)).await {
        Ok(conn) => conn,
        Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "connecting timed out"))),
    }
}

/// `n` connection managers on `url`, made at once.
async fn managers(url: &str, n: usize) -> Result<Vec<ConnectionManager>, redis::RedisError> {
    futures_util::future::try_join_all((0..n).map(|_| manager(url))).await
}

impl Link {
    /// Connects to `url` (`redacted` is how errors name it): a Redis URL, or
    /// a Sentinel URL whose primary is asked for first, or a Cluster URL;
    /// with `waiting` more connections for the writes that wait for replicas.
    pub(super) async fn connect(url: &str, redacted: &str, waiting: usize) -> Result<Arc<Link>, StoreError> {
        if let Some(seeds) = super::cluster::seeds(url) {
            let seeds = seeds?;
            let unreachable = |e| StoreError::Setup {
                detail: format!(
                    "can't reach the Redis Cluster at {redacted}: check that its nodes run, that the URL names \
                     some of them, and that the cluster is up (CLUSTER INFO says cluster_state:ok)"
                ),
                source: Some(Box::new(e)),
            };
            let conn = super::cluster::connect(&seeds, CALL_LIMIT, CONNECT_LIMIT, true).await.map_err(unreachable)?;
            let once = || super::cluster::connect(&seeds, CALL_LIMIT, CONNECT_LIMIT, false);
            let (once, waiting_once) = futures_util::future::try_join(
                once(),
                futures_util::future::try_join_all((0..waiting).map(|_| once())),
            )
            .await
            .map_err(unreachable)?;
            return Ok(Arc::new(Link {
                conn: RwLock::new(Conn::Cluster(conn)),
                once: Some(once),
                waiting: RwLock::new(Vec::new()),
                waiting_once,
                next_waiting: AtomicUsize::new(0),
                url: Mutex::new(url.to_owned()),
                sentinel: None,
                asking: tokio::sync::Mutex::new(None),
            }));
        }
        let sentinel = SentinelUrl::parse(url).transpose()?;
        let target = match &sentinel {
            Some(sentinel) => sentinel.ask().await.map_err(|why| {
                StoreError::setup(format!(
                    "no Sentinel of {redacted} named a reachable primary `{}`: {why}; check the Sentinels' \
                     addresses and the primary's name",
                    sentinel.name
                ))
            })?,
            None => {
                redis::Client::open(url).map_err(|e| StoreError::Setup {
                    detail: format!(
                        "{redacted} is not a Redis URL: use redis://[:password@]host[:port][/db], rediss:// for \
                         TLS, redis+sentinel://host:port,.../MASTER_NAME or redis+cluster://host:port,..."
                    ),
                    source: Some(Box::new(e)),
                })?;
                url.to_owned()
            }
        };
        let unreachable = |e| StoreError::Setup {
            detail: format!("can't reach Redis at {redacted}: check that it runs and that the URL is right"),
            source: Some(Box::new(e)),
        };
        let conn = manager(&target).await.map_err(unreachable)?;
        let waiting = managers(&target, waiting).await.map_err(unreachable)?;
        let link = Arc::new(Link {
            conn: RwLock::new(Conn::One(conn)),
            once: None,
            waiting: RwLock::new(waiting),
            waiting_once: Vec::new(),
            next_waiting: AtomicUsize::new(0),
            url: Mutex::new(target),
            sentinel,
            asking: tokio::sync::Mutex::new(None),
        });
        if let Some(sentinel) = &link.sentinel {
            for host_port in sentinel.sentinels() {
                tokio::spawn(watch(Arc::downgrade(&link), host_port.to_owned()));
            }
        }
        Ok(link)
    }

    /// The connection to use now (a cheap clone).
    pub(super) fn conn(&self) -> Conn {
        self.conn.read().clone()
    }

    /// The connection for a write that waits for replicas: on one server
    /// the next of those kept for them, else [`conn`](Self::conn).
    pub(super) fn waiting_conn(&self) -> Conn {
        let waiting = self.waiting.read();
        if waiting.is_empty() {
            return self.conn();
        }
        let i = self.next_waiting.fetch_add(1, Ordering::Relaxed) % waiting.len();
        Conn::One(waiting[i].clone())
    }

    /// The connection of one-slot writes, on a cluster (a cheap clone).
    pub(super) fn once(&self) -> Option<ClusterConnection> {
        self.once.clone()
    }

    /// On a cluster, the connection for a one-slot write or a node's call
    /// that waits for replicas: the next of those kept for them, else
    /// [`once`](Self::once). Sends nothing again by itself, as `once`.
    pub(super) fn waiting_once(&self) -> Option<ClusterConnection> {
        if self.waiting_once.is_empty() {
            return self.once();
        }
        let i = self.next_waiting.fetch_add(1, Ordering::Relaxed) % self.waiting_once.len();
        Some(self.waiting_once[i].clone())
    }

    /// The cluster connection, on a cluster.
    pub(super) fn cluster(&self) -> Option<ClusterConnection> {
        match &*self.conn.read() {
            Conn::Cluster(c) => Some(c.clone()),
            Conn::One(_) => None,
        }
    }

    /// Notes a failed call: with Sentinel, a `READONLY` answer or a broken
    /// connection makes the store ask for the primary again, in the
    /// background.
    pub(super) fn trouble(self: &Arc<Self>, readonly: bool, e: Option<&redis::RedisError>) {
        if self.sentinel.is_none() {
            return;
        }
        let lost = e.is_some_and(|e| e.is_io_error() || e.is_timeout() || e.is_connection_dropped());
        if readonly || lost || e.is_some_and(|e| e.code() == Some("READONLY")) {
            tokio::spawn(self.clone().ask_again(None));
        }
    }

    /// Asks the Sentinels for the primary (or takes `known`, from a
    /// `+switch-master` message) and moves the connection there if it moved.
    async fn ask_again(self: Arc<Self>, known: Option<String>) {
        let Some(sentinel) = &self.sentinel else { return };
        // A failed call asks only if no one is asking: a burst of failures
        // asks once. A `+switch-master` message waits its turn.
        let mut last = match (&known, self.asking.try_lock()) {
            (_, Ok(last)) => last,
            (None, Err(_)) => return,
            (Some(_), Err(_)) => self.asking.lock().await,
        };
        if known.is_none() && last.is_some_and(|at| at.elapsed() < ASK_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let target = match known {
            Some(url) => url,
            None => match sentinel.ask().await {
                Ok(url) => url,
                Err(why) => {
                    tracing::warn!(kind = crate::log::Kind::RedisSentinel.as_str(), %why, "no Sentinel named a primary; asking again at the next failed call");
                    return;
                }
            },
        };
        if *self.url.lock() == target {
            return;
        }
        let waiting = self.waiting.read().len();
        match futures_util::future::try_join(manager(&target), managers(&target, waiting)).await {
            Ok((conn, waiting)) => {
                *self.conn.write() = Conn::One(conn);
                *self.waiting.write() = waiting;
                tracing::warn!(
                    kind = crate::log::Kind::RedisFailover.as_str(),
                    primary = %crate::secret::redact(&target),
                    "the Redis primary moved (Sentinel): counting goes on at the new primary"
                );
                *self.url.lock() = target;
            }
            Err(e) => {
                tracing::warn!(kind = crate::log::Kind::RedisSentinel.as_str(), error = %e, "can't reach the primary Sentinel named; asking again at the next failed call");
            }
        }
    }
}

/// Follows `+switch-master` on the Sentinel at `host_port` while the link
/// lives, resubscribing after a lost connection.
async fn watch(link: Weak<Link>, host_port: String) {
    loop {
        let Some(sentinel) = link.upgrade().and_then(|l| l.sentinel.clone()) else { return };
        let name = sentinel.name.clone();
        let subscribed = async {
            let open = |url: String| async move { redis::Client::open(url)?.get_async_pubsub().await };
            let mut pubsub = sentinel.with_sentinel(&host_port, open).await.ok()?;
            pubsub.subscribe("+switch-master").await.ok()?;
            Some(pubsub)
        }
        .await;
        if let Some(pubsub) = subscribed {
            let mut messages = pubsub.into_on_message();
            loop {
                // Wake now and then to see whether the store is gone.
                let message = match tokio::time::timeout(Duration::from_secs(5), messages.next()).await {
                    Ok(Some(message)) => message,
                    Ok(None) => break,
                    Err(_) if link.strong_count() == 0 => return,
                    Err(_) => continue,
                };
                let Ok(text) = message.get_payload::<String>() else { continue };
                let Some(link) = link.upgrade() else { return };
                if let (Some((host, port)), Some(sentinel)) = (switched_to(&text, &name), &link.sentinel) {
                    let url = sentinel.primary(&host, port);
                    tokio::spawn(link.ask_again(Some(url)));
                }
            }
        }
        if link.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
