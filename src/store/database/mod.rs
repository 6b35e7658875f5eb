//! `DatabaseStore`: counts in the app's own SQL database, so every instance of
//! a site shares one budget. SQLite on rusqlite (see `sqlite`), PostgreSQL
//! and MySQL/MariaDB on sqlx.
//!
//! - Every update is one short transaction of its own with the rows of its keys
//!   locked, a key's first update included (a missing row is created locked),
//!   or an equivalent: a one-key count on PostgreSQL or MySQL first reads the
//!   row and writes only if it is unchanged; a row this store remembers, or
//!   a missing one, is counted by one such statement (`crate::last_seen`,
//!   `read_first.rs`); whatever changed under them falls back to the lock.
//! - Under load, counts that wait go together (`queue.rs`): on SQLite in one
//!   transaction, on PostgreSQL the remembered-row statements in one
//!   statement, each count still exact on its own.
//! - `now` and expiry come from the database's clock (for a remembered row,
//!   its estimate, which the database checks in the same statement).
//! - Rows are named by HMAC-SHA-256 of the key under the site secret, and carry
//!   the secret's generation.
//! - A sweeper removes expired rows in small batches at start and every 5 minutes.
//! - The bound is kept without a table scan per request: each instance keeps
//!   an estimate of the live rows (an exact count at start and after every
//!   sweep, plus its own adds) and makes it exact again near the bound, at
//!   most once a second, in the background.

mod attempt;
mod builder;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod conns;
mod error;
mod migrate;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod queue;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod read_first;
pub(crate) mod row;
#[cfg(feature = "sqlite")]
mod sqlite;
mod sweep;
mod update_owned;
mod upkeep;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use smallvec::SmallVec;

use self::row::{decide, Family, KeyHash, Stored};
use crate::bound::{FamilyAdmission, FamilyTags, SharedBound, Short};
use crate::error::Unavailable;
use crate::key_hash::Secret;
use crate::rules::check_keys;
use crate::transaction::refuse_in_transaction;
use crate::{Apply, Entry, LimitStore, StoreError};

pub use self::builder::DatabaseStoreBuilder;
pub use self::migrate::DEFAULT_TABLE;

/// The default bound of a database store.
pub(crate) const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
/// The longest a count or read may take in the store itself. The servers
/// bound their own work near the guard's 2 s deadline; this bounds the rest
/// (a connection that stopped answering), so that a call the guard stopped
/// waiting for gives its in-flight place back instead of holding it until the
/// operating system gives up on the connection.
pub(crate) const CALL_LIMIT: Duration = Duration::from_secs(5);

/// How many keys' last rows a store remembers by default, to count them in
/// one round trip (PostgreSQL, MySQL; see [`DatabaseStoreBuilder::remember_rows`]).
pub(crate) const DEFAULT_REMEMBER_ROWS: usize = 100_000;

/// How often the sweeper runs after its first run at start; a fifth of it
/// while many rows are about to expire (see the sweeper).
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(300);

/// Counts in the app's SQL database. Cheap to clone; clones share one pool.
/// `shared()` is true.
#[derive(Clone, Debug)]
pub struct DatabaseStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    db: Db,
    tally: attempt::Tally,
    secret: Secret,
    bound: SharedBound,
    /// The families' tags, and what each wrote (see `bound/tags.rs`): each
    /// row's `family` column holds its key's tag.
    families: FamilyTags,
    /// Set once, right after the sweeper is spawned with a `Weak` of this.
    sweeper: std::sync::OnceLock<tokio::task::AbortHandle>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(sweeper) = self.sweeper.get() {
            sweeper.abort();
        }
    }
}

/// One backend's connection pool and its table's statements.
#[derive(Debug)]
enum Db {
    #[cfg(feature = "sqlite")]
    Sqlite(sqlite::Sqlite),
    #[cfg(feature = "postgres")]
    Postgres(Box<postgres::Postgres>),
    #[cfg(feature = "mysql")]
    Mysql(Box<mysql::Mysql>),
}

/// Calls the same method on whichever backend `db` is.
macro_rules! on_backend {
    ($db:expr, $b:ident => $call:expr) => {
        match $db {
            #[cfg(feature = "sqlite")]
            Db::Sqlite($b) => $call,
            #[cfg(feature = "postgres")]
            Db::Postgres($b) => {
                let $b = &**$b;
                $call
            }
            #[cfg(feature = "mysql")]
            Db::Mysql($b) => {
                let $b = &**$b;
                $call
            }
        }
    };
}
use on_backend;

impl DatabaseStore {
    /// What the store holds and how its counts went, in one value: what
    /// `limit-store stats` shows. The live entries are counted
    /// exactly (index scans: for a look now and then, not for every request).
    pub async fn info(&self) -> Result<DatabaseInfo, StoreError> {
        let shared = &*self.shared;
        let generation = shared.secret.generation();
        let live_entries = on_backend!(&shared.db, b => b.count_live(generation).await)?;
        let mut generations = on_backend!(&shared.db, b => b.generations().await)?;
        generations.sort_unstable_by_key(|&(g, _)| (g != generation, std::cmp::Reverse(g)));
        let [one_statement, read_then_write, locked] = shared.tally.paths();
        Ok(DatabaseInfo {
            generation,
            live_entries,
            generations,
            one_statement,
            read_then_write,
            locked,
            batched: on_backend!(&shared.db, b => b.batched()),
            read_together: on_backend!(&shared.db, b => b.read_together()),
        })
    }
}

/// A [`DatabaseStore`]'s table, and how its counts went since it connected
/// (how many took one statement, a read then a write, or the locked
/// transaction), from [`DatabaseStore::info`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DatabaseInfo {
    /// This store's secret generation.
    pub generation: i64,
    /// Live entries written under this store's secret.
    pub live_entries: u64,
    /// Live entries per secret generation: this store's own first (when it
    /// has any), then the others by generation, highest first.
    pub generations: Vec<(i64, u64)>,
    /// Counts done in one statement from a remembered row, or of a key
    /// whose row was missing, as guessed (PostgreSQL, MySQL).
    pub one_statement: u64,
    /// One-key counts that read the row, then wrote it only if unchanged.
    pub read_then_write: u64,
    /// Counts that ran the locked transaction: several keys, SQLite, or a
    /// row that changed under the optimistic path.
    pub locked: u64,
    /// Counts that went with others that waited at the same time: in one
    /// transaction (SQLite) or one statement (PostgreSQL). Each is still
    /// counted under one of the paths above.
    pub batched: u64,
    /// One-key counts of a row this store had not seen that read it in one
    /// statement with others' (PostgreSQL, under load); each then wrote
    /// under one of the paths above.
    pub read_together: u64,
}

/// Runs one store call for at most [`CALL_LIMIT`]; past it the call is
/// dropped (its transaction rolls back, its connection is discarded).
async fn bounded<T>(call: impl std::future::Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    match tokio::time::timeout(CALL_LIMIT, call).await {
        Ok(result) => result,
        Err(_) => Err(StoreError::unavailable(
            Unavailable::Timeout,
            format!("the database gave no answer within {CALL_LIMIT:?}; the call was dropped"),
        )),
    }
}

impl DatabaseStore {
    /// The rows' keys of a call on `keys`: refused inside the app's
    /// transaction and for keys the rules refuse.
    fn hashes(&self, keys: &[&str]) -> Result<SmallVec<[KeyHash; 4]>, StoreError> {
        refuse_in_transaction()?;
        check_keys(keys)?;
        Ok(keys.iter().map(|k| self.shared.secret.key_hash(k)).collect())
    }

    /// The families of `keys` (checked by [`Self::hashes`]), and their tags.
    fn families(&self, keys: &[&str]) -> SmallVec<[Family; 4]> {
        let shared = &*self.shared;
        keys.iter()
            .map(|k| {
                let (id, tag) = shared.families.of(shared.bound.counts(), &shared.secret, k);
                Family::new(id, tag)
            })
            .collect()
    }

    /// The answer of an update after its attempt number `attempt` came out as
    /// `outcome` (refused for `short`, if it was); `None` when the store was
    /// full and made room from expired rows, so the update tries once more.
    /// A family at its share is answered at once: its entries are the ones
    /// that would have to expire.
    async fn answer(
        &self,
        outcome: Result<(), StoreError>,
        attempt: usize,
        short: Option<Short>,
    ) -> Option<Result<(), StoreError>> {
        let shared = &*self.shared;
        match outcome {
            Err(e) if e.unavailable_reason() == Some(Unavailable::Full) && matches!(short, Some(Short::Share(_))) => {
                if let Some(short) = short {
                    shared.bound.counts().note_short("database", short);
                }
                self.refresh_bound_if_due();
                Some(Err(e))
            }
            Err(e) if e.unavailable_reason() == Some(Unavailable::Full) && attempt == 0 => {
                if shared.bound.make_room(|| shared.sweep()).await {
                    return None;
                }
                shared.bound.note_full();
                Some(Err(e))
            }
            Err(e) if e.unavailable_reason() == Some(Unavailable::Full) => {
                shared.bound.note_full();
                Some(Err(e))
            }
            other => {
                self.refresh_bound_if_due();
                Some(other)
            }
        }
    }

    /// Makes the bound's estimate exact again when it is due, in the
    /// background: no request waits for the count.
    fn refresh_bound_if_due(&self) {
        if !self.shared.bound.claim_refresh() {
            return;
        }
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let (at, written) = (shared.bound.begin_refresh(), shared.families.written());
            let census = on_backend!(&shared.db, b => b.count_families(shared.secret.generation()).await).ok();
            if let Some(census) = &census {
                shared.families.attribute(shared.bound.counts(), &census.by_tag, &written);
            }
            shared.bound.refreshed(at, census.map(|c| c.live));
        });
    }
}

/// This generation's live rows as one count found them: in all, and per
/// family tag (rows written before the `family` column count in all only).
#[derive(Debug, Default)]
struct Census {
    live: u64,
    by_tag: std::collections::HashMap<crate::bound::Tag, u64>,
}

impl Census {
    /// The census of `(family column, rows)` pairs, as a `GROUP BY` answers.
    fn of(groups: impl IntoIterator<Item = (Option<i16>, i64)>) -> Self {
        let mut census = Census::default();
        for (family, n) in groups {
            let n = n.unsigned_abs();
            census.live += n;
            if let Some(family) = family {
                *census.by_tag.entry(row::tag_of_column(family)).or_default() += n;
            }
        }
        census
    }
}

impl Shared {
    /// Live rows of every generation that expire within `within_ms`.
    async fn expiring(&self, within_ms: i64) -> Result<u64, StoreError> {
        on_backend!(&self.db, b => b.count_expiring(within_ms).await)
    }

    /// One sweep: expired rows of every generation, in batches; then the
    /// bound's estimate is refreshed from an exact count.
    async fn sweep(&self) -> Result<u64, StoreError> {
        let removed = on_backend!(&self.db, b => b.sweep().await)?;
        self.bound.note_sweep(removed);
        let (at, written) = (self.bound.begin_refresh(), self.families.written());
        let census = on_backend!(&self.db, b => b.count_families(self.secret.generation()).await)?;
        self.families.attribute(self.bound.counts(), &census.by_tag, &written);
        self.bound.refresh(at, census.live);
        Ok(removed)
    }
}

#[async_trait]
impl LimitStore for DatabaseStore {
    fn shared(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        Some(self.shared.bound.stats())
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        let hashes = self.hashes(keys)?;
        let families = self.families(keys);
        let shared = &*self.shared;
        let generation = shared.secret.generation();
        for attempt in 0.. {
            let mut admission = FamilyAdmission::new(shared.bound.counts(), &shared.families);
            let decide = &mut |rows: &[Option<Stored>], now| {
                decide(rows, &hashes, &families, now, generation, apply, &mut admission)
            };
            let outcome = on_backend!(&shared.db, b => bounded(attempt::count(b, &shared.tally, &hashes, generation, decide)).await);
            // Written: keep the new entries counted and give back the removed
            // ones. Failed (or this future dropped): the room goes back.
            let short = admission.short();
            if outcome.is_ok() {
                admission.commit();
            } else {
                drop(admission);
            }
            if let Some(done) = self.answer(outcome, attempt, short).await {
                return done;
            }
        }
        unreachable!("the loop returns")
    }

    async fn update_owned(&self, keys: &[&str], apply: Box<crate::OwnedApply>) -> Result<(), StoreError> {
        self.update_owned_here(keys, apply).await
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        let hashes = self.hashes(keys)?;
        let shared = &*self.shared;
        let (rows, now) = on_backend!(&shared.db, b => bounded(b.read(&hashes)).await)?;
        let generation = shared.secret.generation();
        rows.iter().zip(&hashes).map(|(row, hash)| row::live_entry(row.as_ref(), hash, now, generation)).collect()
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        refuse_in_transaction()?;
        self.shared.sweep().await
    }
}
