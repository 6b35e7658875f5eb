//! How one count runs on any backend: a single key first tries the backend's
//! optimistic path (if it has one), then the locked transaction runs, retried
//! on deadlocks. Backends only say how to do each attempt in their SQL.

use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::error::{ended_before_applied, is_retryable};
use super::error::{settle, Failure};
use super::row::{Decide, KeyHash};
use crate::StoreError;

/// How a one-statement try went (PostgreSQL and MySQL make them; SQLite never does).
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
#[derive(Debug)]
pub(super) enum Guess {
    /// It wrote (or confirmed) the count: done in one round trip.
    Done,
    /// The row or the clock was not as guessed; nothing was written, and this
    /// is the row and the clock the same statement read.
    Missed { row: Option<super::row::Stored>, now: crate::Millis },
    /// Nothing to guess from (no clock reading yet, a backend without the path,
    /// or `apply` refused the guessed row): read first.
    NotTried,
}

/// How an optimistic try went.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tried {
    /// Written (or confirmed) by one statement, from a remembered row.
    OneStatement,
    /// Written after reading the row.
    ReadThenWrite,
    /// The row changed under it: nothing written.
    Changed,
}

/// Counts of the paths counts took, for [`DatabaseInfo`](super::DatabaseInfo).
#[derive(Debug, Default)]
pub(super) struct Tally {
    one_statement: AtomicU64,
    read_then_write: AtomicU64,
    locked: AtomicU64,
}

impl Tally {
    /// Counts done in one statement, read then written, and locked.
    pub(super) fn paths(&self) -> [u64; 3] {
        [&self.one_statement, &self.read_then_write, &self.locked].map(|n| n.load(Ordering::Relaxed))
    }
}

/// One backend's attempts at a count.
pub(super) trait Attempts {
    /// One locked transaction over the rows of `hashes`.
    async fn locked(&self, hashes: &[KeyHash], generation: i64, decide: &mut Decide<'_>) -> Result<(), Failure>;

    /// One optimistic try on a single key (its hash, the store's generation,
    /// `decide`); `None` for a backend without such a path.
    async fn optimistic(&self, _: &KeyHash, _: i64, _: &mut Decide<'_>) -> Option<Result<Tried, Failure>> {
        None
    }

    /// The server ended the sessions of the backend's connections (a restart):
    /// closes the unused ones at once, so the next attempt runs on a fresh one.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn sessions_ended(&self) {}
}

/// Implements [`Attempts`] for a backend whose `impl` has `try_update` (the
/// locked transaction) and `try_optimistic` (one optimistic try on a single
/// key): PostgreSQL and MySQL, which differ only in how they make each.
/// `Attempts`, `KeyHash`, `Decide`, `Failure` and `Tried` are in scope.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! attempts {
    ($backend:ty) => {
        impl Attempts for $backend {
            async fn locked(
                &self,
                hashes: &[KeyHash],
                generation: i64,
                decide: &mut Decide<'_>,
            ) -> Result<(), Failure> {
                self.try_update(hashes, generation, decide).await
            }

            async fn optimistic(
                &self,
                hash: &KeyHash,
                generation: i64,
                decide: &mut Decide<'_>,
            ) -> Option<Result<Tried, Failure>> {
                Some(self.try_optimistic(hash, generation, decide).await)
            }

            fn sessions_ended(&self) {
                self.pool.purge_idle();
            }
        }
    };
}
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) use attempts;

/// Runs one count on `backend`. A count that met a connection whose session
/// the server had ended before anything of the count was applied (a server
/// restart: see [`ended_before_applied`]) runs once more, on a fresh
/// connection, so no caller sees the restart; a count that may have been
/// applied is never run again.
pub(super) async fn count<B: Attempts>(
    backend: &B,
    tally: &Tally,
    hashes: &[KeyHash],
    generation: i64,
    decide: &mut Decide<'_>,
) -> Result<(), StoreError> {
    match count_once(backend, tally, hashes, generation, decide).await {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        Err(Failure::Db(e)) if ended_before_applied(&e) => {
            tracing::info!(
                kind = crate::log::Kind::SessionEnded.as_str(),
                error = %e,
                "the database had ended a pooled connection's session (a restart?); the count runs again on a fresh one"
            );
            backend.sessions_ended();
            count_once(backend, tally, hashes, generation, decide).await.map_err(|f| f.settled("count"))
        }
        done => done.map_err(|f| f.settled("count")),
    }
}

/// One run of a count: the optimistic path for one key, then the locked one.
async fn count_once<B: Attempts>(
    backend: &B,
    tally: &Tally,
    hashes: &[KeyHash],
    generation: i64,
    decide: &mut Decide<'_>,
) -> Result<(), Failure> {
    if let [hash] = hashes {
        match backend.optimistic(hash, generation, decide).await {
            Some(Ok(Tried::OneStatement)) => {
                tally.one_statement.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Some(Ok(Tried::ReadThenWrite)) => {
                tally.read_then_write.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
            Some(Ok(Tried::Changed)) | None => {} // the row changed under us, or no such path: lock
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Some(Err(Failure::Db(e))) if is_retryable(&e) => {} // a conflict: the locked path settles it
            Some(Err(failure)) => return Err(failure),
        }
    }
    let mut locked = Locked::new(tally);
    loop {
        match backend.locked(hashes, generation, decide).await {
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            Err(Failure::Db(e)) if ended_before_applied(&e) => return Err(Failure::Db(e)),
            done => {
                if let Some(done) = locked.settle(done) {
                    return done.map_err(Failure::Store);
                }
            }
        }
    }
}

/// The locked transactions of one count: run again on a deadlock or a
/// serialization failure until one settles.
pub(super) struct Locked<'a> {
    tally: &'a Tally,
    retries: u32,
}

impl<'a> Locked<'a> {
    pub(super) fn new(tally: &'a Tally) -> Self {
        Locked { tally, retries: 0 }
    }

    /// The count's answer once `done` settles it (tallied when written);
    /// `None`: run the transaction again.
    pub(super) fn settle(&mut self, done: Result<(), Failure>) -> Option<Result<(), StoreError>> {
        let done = settle(done, &mut self.retries)?;
        if done.is_ok() {
            self.tally.locked.fetch_add(1, Ordering::Relaxed);
        }
        Some(done)
    }
}

/// Generates `try_optimistic` inside a backend's `impl` (with [`write_if`]): read
/// the row and the clock in one autocommit statement, run `decide`, then write
/// with one statement that only applies if the row is still as read, both on
/// one connection (a guess before them takes its own, or none while it waits
/// to go with others). The backend has `pool`, `insert_new(hash, generation,
/// value, expires_at)`, `replace_if(generation, value, expires_at, family,
/// hash, old generation, old value, old expiry)`, `delete_if(hash, old generation, old
/// value, old expiry)`, `read_rows(conn, hashes)`, `remember(hash, row)` and
/// `guess(hash, generation, decide)` (a one-statement try from what the
/// backend remembers; see `last_seen.rs`). PostgreSQL has its own, whose second
/// try may go with others (`postgres/optimistic.rs`).
#[cfg(feature = "mysql")]
macro_rules! optimistic {
    ($conn:ty) => {
        /// One optimistic try on one key: a guess from what the backend
        /// remembers, else a read; then a conditional write. `Changed` when
        /// the row changed in between (nothing was written). sqlx asks
        /// MySQL for matched rows (`CLIENT_FOUND_ROWS`), so a write that
        /// changes nothing still reports its row.
        async fn try_optimistic(
            &self,
            hash: &KeyHash,
            generation: i64,
            decide: &mut Decide<'_>,
        ) -> Result<Tried, Failure> {
            // The guess takes a connection of its own only when it sends its
            // statement alone: a guess that waits to go with others holds none.
            let guessed = match self.guess(hash, generation, decide).await? {
                Guess::Done => return Ok(Tried::OneStatement),
                Guess::Missed { row, now } => Some((row, now)),
                Guess::NotTried => None,
            };
            let mut conn = self.pool.acquire().await?;
            let (row, now) = match guessed {
                Some(read) => read,
                None => {
                    let (rows, now) = self.read_rows(&mut conn, std::slice::from_ref(hash)).await?;
                    (rows.into_iter().next().flatten(), now)
                }
            };
            let done = self.write_if(&mut conn, hash, generation, row, now, decide).await?;
            conn.release();
            Ok(if done { Tried::ReadThenWrite } else { Tried::Changed })
        }
    };
}
#[cfg(feature = "mysql")]
pub(super) use optimistic;

/// Generates `write_if`, `write_decided` and `conditional_query` inside a
/// backend's `impl` (its connection and database types): the conditional
/// write of an optimistic count, after its read, and the statement that
/// makes it (MySQL's guesses bind their clock bound after it). The backend
/// has `insert_new`, `replace_if`, `delete_if` and `remember` (see
/// [`optimistic`]), and `row::decide_one` is in scope.
#[cfg(any(feature = "postgres", feature = "mysql"))]
macro_rules! write_if {
    ($conn:ty, $db:ty) => {
        /// Runs `decide` on `row` as read at `now`, then writes only if the
        /// row is still `row`; false when it was not (nothing was written).
        async fn write_if(
            &self,
            conn: &mut $conn,
            hash: &KeyHash,
            generation: i64,
            row: Option<Stored>,
            now: Millis,
            decide: &mut Decide<'_>,
        ) -> Result<bool, Failure> {
            let write = decide_one(decide, &row, now).map_err(Failure::Store)?;
            self.write_decided(conn, hash, generation, row, write).await
        }

        /// Writes `write` only if the row is still `row`; false when it was
        /// not (nothing was written).
        async fn write_decided(
            &self,
            conn: &mut $conn,
            hash: &KeyHash,
            generation: i64,
            row: Option<Stored>,
            write: RowWrite,
        ) -> Result<bool, Failure> {
            let after = row_after(&row, &write, generation);
            let statements = [&*self.insert_new, &*self.replace_if, &*self.delete_if];
            let Some(query) = Self::conditional_query(statements, hash, generation, Conditional::new(row, write))
            else {
                self.remember(hash, after);
                return Ok(true);
            };
            let done = query.execute(&mut *conn).await?;
            let done = done.rows_affected() == 1;
            self.remember(hash, if done { after } else { None });
            Ok(done)
        }

        /// The statement of `conditional` among `statements` (insert,
        /// replace, delete: `insert_new`, `replace_if` and `delete_if`, or
        /// variants that bind more after these), with its values bound;
        /// `None` when there is nothing to write.
        fn conditional_query<'q>(
            statements: [&'q str; 3],
            hash: &'q KeyHash,
            generation: i64,
            conditional: Conditional,
        ) -> Option<sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments<'q>>> {
            let [insert, replace, delete] = statements;
            Some(match conditional {
                Conditional::Nothing => return None,
                Conditional::Insert { value, expires_at, family } => {
                    sqlx::query(insert).bind(&hash[..]).bind(generation).bind(value).bind(expires_at).bind(family)
                }
                Conditional::Replace { old, value, expires_at, family } => sqlx::query(replace)
                    .bind(generation)
                    .bind(value)
                    .bind(expires_at)
                    .bind(family)
                    .bind(&hash[..])
                    .bind(old.generation)
                    .bind(old.value)
                    .bind(old.expires_at),
                Conditional::Delete { old } => {
                    sqlx::query(delete).bind(&hash[..]).bind(old.generation).bind(old.value).bind(old.expires_at)
                }
            })
        }
    };
}
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) use write_if;

/// The backends' tests of a guess's clock window: on a remembered row, a
/// count (`count`, of `n + 1` by the optimistic path) is one statement
/// while the estimate of the database's clock holds, and one made on an
/// estimate 10 s behind or ahead writes nothing and reads instead; the
/// estimate then follows the database again. The first count has no clock
/// reading or row to guess from.
#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
pub(super) async fn guesses_follow_the_clock(
    clock: &crate::server_clock::ServerClock,
    mut count: impl AsyncFnMut() -> Tried,
) {
    assert_eq!(count().await, Tried::ReadThenWrite, "nothing remembered yet");
    assert_eq!(count().await, Tried::OneStatement, "a remembered row, a fresh estimate");
    clock.shift(-10_000);
    assert_eq!(count().await, Tried::ReadThenWrite, "an estimate 10 s behind");
    clock.shift(10_000);
    assert_eq!(count().await, Tried::ReadThenWrite, "an estimate 10 s ahead");
    assert_eq!(count().await, Tried::OneStatement, "the estimate follows the database");
}
