//! The servers' connections, pooled without a round trip on the way back.
//!
//! sqlx's pool tests every connection as it comes back: it spawns a task that
//! pings the server (a `Sync` on PostgreSQL, `COM_PING` on MySQL) before the
//! connection can be used again. That is one more round trip, and one more
//! wake-up of the server, for every count, which on a small machine costs a
//! share of the counts per second (measured in 355297f). Here a call that ends cleanly
//! gives its connection back at once ([`Conn::release`]). Only a connection
//! given back mid-call (its call failed or was dropped, perhaps with a
//! transaction left open or an answer half read) is pinged first, as sqlx
//! does, which finishes what the call left (the rollback sqlx queues when a
//! transaction is dropped) before anyone uses it again.
//!
//! Connections open when needed, up to the store's `max_connections`, and
//! close after [`IDLE_TIMEOUT`] unused. A connection unused for less than
//! [`CHECK_AFTER`] is not tested before use (under load none is). One unused
//! longer is pinged first: after a server restart every pooled connection is
//! dead, and without the ping each would fail one call before it is
//! replaced, some of them after calls on new connections had succeeded.
//! When a ping fails, or a connection given back mid-call can't be pinged,
//! the server has dropped its connections: every unused one is closed at
//! once, and the next calls open new ones.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sqlx::{ConnectOptions, Connection};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a connection may sit unused before it is closed.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The longest the ping of a connection given back mid-call may take; after
/// it the connection is dropped.
const PING_LIMIT: Duration = Duration::from_secs(2);

/// A connection unused this long is pinged before use: shorter than a server
/// restart takes, longer than a connection rests between counts under load.
pub(super) const CHECK_AFTER: Duration = Duration::from_millis(500);

/// Runs on every new connection before its first use (session settings).
pub(super) type Init<C> = for<'c> fn(&'c mut C) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + 'c>>;

/// An [`Init`] that sets nothing up.
#[cfg(feature = "postgres")]
pub(super) fn no_init<C>(_: &mut C) -> Pin<Box<dyn Future<Output = Result<(), sqlx::Error>> + Send + '_>> {
    Box::pin(async { Ok(()) })
}

/// A pool of connections of one kind (`PgConnection`, `MySqlConnection`).
pub(super) struct Conns<C: Connection + 'static> {
    inner: Arc<Inner<C>>,
}

impl<C: Connection + 'static> Clone for Conns<C> {
    fn clone(&self) -> Self {
        Conns { inner: self.inner.clone() }
    }
}

impl<C: Connection + 'static> std::fmt::Debug for Conns<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("idle", &self.inner.idle.lock().len())
            .field("free", &self.inner.slots.available_permits())
            .finish()
    }
}

struct Inner<C: Connection + 'static> {
    options: C::Options,
    init: Init<C>,
    /// Unused connections, the most recently used last (taken first).
    idle: Mutex<Vec<(C, Instant)>>,
    /// One permit per connection that may be open.
    slots: Arc<Semaphore>,
    acquire_timeout: Duration,
}

impl<C: Connection + 'static> Inner<C> {
    /// Puts a connection back, and closes the one unused longest if it has
    /// been unused too long.
    fn put(&self, conn: C) {
        let stale = {
            let mut idle = self.idle.lock();
            idle.push((conn, Instant::now()));
            match idle.first() {
                Some((_, since)) if since.elapsed() > IDLE_TIMEOUT => Some(idle.remove(0).0),
                _ => None,
            }
        };
        if let Some(stale) = stale {
            close(stale);
        }
    }
}

impl<C: Connection + 'static> Inner<C> {
    /// The server dropped its connections: closes every unused one.
    fn purge(&self) {
        let stale: Vec<(C, Instant)> = std::mem::take(&mut *self.idle.lock());
        for (conn, _) in stale {
            close(conn);
        }
    }

    /// An unused connection, pinged first if it rested long; `None` when
    /// there is none (or the ping found the server had dropped them all).
    async fn reuse(&self) -> Option<C> {
        let (mut conn, since) = self.idle.lock().pop()?;
        if since.elapsed() < CHECK_AFTER {
            return Some(conn);
        }
        match tokio::time::timeout(PING_LIMIT, conn.ping()).await {
            Ok(Ok(())) => Some(conn),
            _ => {
                drop(conn);
                self.purge();
                None
            }
        }
    }
}

impl<C: Connection + 'static> Drop for Inner<C> {
    /// The store is gone: its unused connections close politely.
    fn drop(&mut self) {
        for (conn, _) in self.idle.get_mut().drain(..) {
            close(conn);
        }
    }
}

/// Closes a connection politely (the server sees a goodbye, not a dropped
/// socket), on a task of its own when there is a runtime.
fn close<C: Connection + 'static>(conn: C) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = tokio::time::timeout(PING_LIMIT, conn.close()).await;
        });
    }
}

impl<C: Connection + 'static> Conns<C> {
    /// A pool of at most `max` connections made from `options`, each set up
    /// by `init`; waiting for one ends with `PoolTimedOut` after
    /// `acquire_timeout`. Opens one connection at once, so a server that
    /// can't be reached is an error here rather than at the first count.
    pub(super) async fn open(
        options: C::Options,
        init: Init<C>,
        max: u32,
        acquire_timeout: Duration,
    ) -> Result<Self, sqlx::Error> {
        let permits = usize::try_from(max.max(1)).unwrap_or(usize::MAX).min(Semaphore::MAX_PERMITS);
        let conns = Conns {
            inner: Arc::new(Inner {
                options,
                init,
                idle: Mutex::new(Vec::new()),
                slots: Arc::new(Semaphore::new(permits)),
                acquire_timeout,
            }),
        };
        conns.acquire().await?.release();
        Ok(conns)
    }

    /// The server ended its sessions (a restart): closes every unused
    /// connection now, so the next call opens a fresh one.
    pub(super) fn purge_idle(&self) {
        self.inner.purge();
    }

    /// A connection: an unused one, or a new one while fewer than the most
    /// are open. Give it back with [`Conn::release`] when the call ended
    /// cleanly.
    pub(super) async fn acquire(&self) -> Result<Conn<C>, sqlx::Error> {
        let inner = &self.inner;
        let get = async {
            let slot = inner.slots.clone().acquire_owned().await.map_err(|_| sqlx::Error::PoolClosed)?;
            let conn = match inner.reuse().await {
                Some(conn) => conn,
                None => {
                    let mut conn = inner.options.connect().await?;
                    (inner.init)(&mut conn).await?;
                    conn
                }
            };
            Ok::<_, sqlx::Error>(Conn { conn: Some(conn), slot: Some(slot), inner: inner.clone(), clean: false })
        };
        match tokio::time::timeout(inner.acquire_timeout, get).await {
            Ok(got) => got,
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }
}

/// A connection out of the pool. Dropped without [`Conn::release`], it is
/// pinged before it goes back (see the module's comment).
pub(super) struct Conn<C: Connection + 'static> {
    conn: Option<C>,
    slot: Option<OwnedSemaphorePermit>,
    inner: Arc<Inner<C>>,
    clean: bool,
}

impl<C: Connection + 'static> Conn<C> {
    /// Gives the connection back for the next call at once. Only for a
    /// connection whose last statement was answered in full, outside any
    /// transaction.
    pub(super) fn release(mut self) {
        self.clean = true;
    }
}

impl<C: Connection + 'static> Deref for Conn<C> {
    type Target = C;
    fn deref(&self) -> &C {
        self.conn.as_ref().expect("a connection until dropped")
    }
}

impl<C: Connection + 'static> DerefMut for Conn<C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().expect("a connection until dropped")
    }
}

impl<C: Connection + 'static> Drop for Conn<C> {
    fn drop(&mut self) {
        let (Some(mut conn), slot) = (self.conn.take(), self.slot.take()) else { return };
        if self.clean {
            // Back before the slot is freed, so whoever takes the slot finds it.
            self.inner.put(conn);
            drop(slot);
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let inner = self.inner.clone();
        runtime.spawn(async move {
            // The slot stays taken until the ping has settled the connection.
            let _slot = slot;
            match tokio::time::timeout(PING_LIMIT, conn.ping()).await {
                Ok(Ok(())) => inner.put(conn),
                // Dead, as after a server restart: so are the unused ones.
                _ => inner.purge(),
            }
        });
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::Executor;

    use super::*;

    /// A pool on the test server. Connecting takes a while on a loaded
    /// machine, so `wait` must be well over a connect (a 300 ms wait failed
    /// in CI).
    async fn open(max: u32, wait: Duration) -> Option<Conns<PgConnection>> {
        let url = std::env::var("LIMIT_STORE_TEST_POSTGRES").ok();
        let Some(url) = url else {
            eprintln!("LIMIT_STORE_TEST_POSTGRES is not set: skipping this database test (.ci/run sets it)");
            return None;
        };
        let options: PgConnectOptions = url.parse().unwrap();
        Some(Conns::open(options, no_init, max, wait).await.unwrap())
    }

    async fn backend(conn: &mut PgConnection) -> i32 {
        sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(conn).await.unwrap()
    }

    /// A released connection is the next one handed out, and no more than
    /// the most are ever open: the next caller waits, then times out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_released_connection_is_used_again_and_the_most_hold() {
        let Some(conns) = open(2, Duration::from_secs(3)).await else { return };
        let mut a = conns.acquire().await.unwrap();
        let pid = backend(&mut a).await;
        a.release();
        let mut a = conns.acquire().await.unwrap();
        assert_eq!(backend(&mut a).await, pid, "the released connection came back");
        let b = conns.acquire().await.unwrap();
        let started = Instant::now();
        assert!(matches!(conns.acquire().await, Err(sqlx::Error::PoolTimedOut)), "only 2 may be open");
        assert!(started.elapsed() >= Duration::from_millis(2900));
        b.release();
        a.release();
    }

    /// A connection dropped inside a transaction, as an error or a dropped
    /// call leaves it, is rolled back before it sits idle: the row lock it
    /// held is free while nobody uses the pool, and the next user finds
    /// nothing of the transaction.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_dropped_mid_transaction_is_rolled_back_before_it_idles() {
        let Some(conns) = open(1, Duration::from_secs(10)).await else { return };
        let url = std::env::var("LIMIT_STORE_TEST_POSTGRES").unwrap();
        let mut other = PgConnection::connect(&url).await.unwrap();
        let table = format!("ls_conns_{}", std::process::id());
        let mut c = conns.acquire().await.unwrap();
        c.execute(&*format!("CREATE TABLE {table} (n int); INSERT INTO {table} VALUES (1)")).await.unwrap();
        {
            let mut tx = c.begin().await.unwrap();
            sqlx::query(&format!("UPDATE {table} SET n = 2")).execute(&mut *tx).await.unwrap();
            // Dropped without commit or rollback; the connection with it.
        }
        drop(c);
        // Nobody takes a connection from the pool meanwhile.
        let lock = format!("SELECT n FROM {table} FOR UPDATE NOWAIT");
        let started = Instant::now();
        let n: i32 = loop {
            match sqlx::query_scalar(&lock).fetch_one(&mut other).await {
                Ok(n) => break n,
                Err(e) if started.elapsed() < Duration::from_secs(2) => {
                    assert!(e.to_string().contains("lock"), "{e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the dropped transaction still holds its row lock: {e}"),
            }
        };
        assert_eq!(n, 1, "the update was rolled back");
        let mut c = conns.acquire().await.unwrap();
        let n: i32 = sqlx::query_scalar(&format!("SELECT n FROM {table}")).fetch_one(&mut *c).await.unwrap();
        assert_eq!(n, 1);
        c.execute(&*format!("DROP TABLE {table}")).await.unwrap();
        c.release();
    }
}
