//! [`DatabaseStoreBuilder`]: a store's settings, the backend its URL names,
//! and opening it, to migrate its table or to connect and start its sweeper.

use std::sync::Arc;
use std::time::Duration;

use super::{
    attempt, migrate, on_backend, sweep, DatabaseStore, Db, Shared, DEFAULT_MAX_ENTRIES, DEFAULT_REMEMBER_ROWS,
    DEFAULT_TABLE, SWEEP_EVERY,
};
use crate::bound::SharedBound;
use crate::key_hash::Secret;
use crate::StoreError;

/// Which backend a URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Sqlite,
    Postgres,
    Mysql,
}

fn kind_of(url: &str) -> Result<Kind, StoreError> {
    let scheme = url.split_once(':').map(|(s, _)| s).unwrap_or("");
    let kind = match scheme {
        "sqlite" => Kind::Sqlite,
        "postgres" | "postgresql" => Kind::Postgres,
        "mysql" | "mariadb" => Kind::Mysql,
        _ => {
            return Err(StoreError::setup(format!(
                "unsupported database URL {:?}: use sqlite://PATH, postgres://… or mysql://…",
                crate::secret::redact(url)
            )))
        }
    };
    let compiled = match kind {
        Kind::Sqlite => cfg!(feature = "sqlite"),
        Kind::Postgres => cfg!(feature = "postgres"),
        Kind::Mysql => cfg!(feature = "mysql"),
    };
    if !compiled {
        let feature = match kind {
            Kind::Sqlite => "sqlite",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
        };
        return Err(StoreError::setup(format!(
            "this build has no {feature} support: enable the `{feature}` feature of limit-store"
        )));
    }
    Ok(kind)
}

/// Settings of a [`DatabaseStore`]; from [`DatabaseStore::builder`].
#[derive(Clone)]
pub struct DatabaseStoreBuilder {
    url: String,
    secret: Option<crate::SecretString>,
    max_entries: u64,
    table: String,
    max_connections: u32,
    sweep_every: Option<Duration>,
    remember_rows: usize,
    durable_commits: bool,
}

impl std::fmt::Debug for DatabaseStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseStoreBuilder")
            .field("url", &crate::secret::redact(&self.url))
            .field("max_entries", &self.max_entries)
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

impl DatabaseStore {
    /// Settings for a store on the database at `url` (`sqlite://PATH`,
    /// `postgres://…`, `mysql://…`).
    pub fn builder(url: &str) -> DatabaseStoreBuilder {
        DatabaseStoreBuilder {
            url: url.to_owned(),
            secret: None,
            max_entries: DEFAULT_MAX_ENTRIES,
            table: DEFAULT_TABLE.to_owned(),
            max_connections: 16,
            sweep_every: Some(SWEEP_EVERY),
            remember_rows: DEFAULT_REMEMBER_ROWS,
            durable_commits: false,
        }
    }
}

impl DatabaseStoreBuilder {
    /// The site secret keys are hashed under (at least 32 bytes). Required by
    /// `connect`; `migrate` needs none.
    pub fn secret(mut self, secret: &str) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// The bound on live entries (default 1,000,000).
    pub fn max_entries(mut self, max_entries: u64) -> Self {
        self.max_entries = max_entries;
        self
    }

    /// The table's name (default `limit_store`): letters, digits and `_`,
    /// starting with a letter or `_`, at most 48 characters.
    pub fn table(mut self, table: &str) -> Self {
        self.table = table.to_owned();
        self
    }

    /// The most connections this store's pool opens (default 16).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// How often the background sweeper runs (default 5 minutes); `None` runs
    /// no sweeper (sweep with `limit-store sweep` or [`LimitStore::sweep`](crate::LimitStore::sweep)).
    pub fn sweep_every(mut self, every: Option<Duration>) -> Self {
        self.sweep_every = every;
        self
    }

    /// How many keys' last rows this store remembers (default 100,000; 0
    /// remembers none). On PostgreSQL, a count on a key this store counted
    /// last, or on a key with no row, is one statement, written only if the
    /// row and the database's clock are as guessed (else the count goes on
    /// from the row that statement read); other counts take two. On MySQL
    /// the same, except that a guess that missed reads next (three
    /// statements in all). A remembered row costs about 150 bytes. SQLite
    /// ignores it.
    pub fn remember_rows(mut self, n: usize) -> Self {
        self.remember_rows = n;
        self
    }

    /// Whether a count's commit waits until the database has written it to
    /// disk (default off). Off, PostgreSQL sessions run with
    /// `synchronous_commit = off` and SQLite with `synchronous = NORMAL`
    /// (WAL): a count is as exact and as visible to every instance as
    /// before, and the app's database does not flush its log once per
    /// request (under an attack, once per attack request). But if the
    /// database server crashes (SQLite: if the machine loses power), the
    /// counts of its last fraction of a second (PostgreSQL: at most three
    /// times `wal_writer_delay`, 0.6 s by default) may be lost, each whole,
    /// never half-written, as a Redis store's are without `appendfsync
    /// always`. On, PostgreSQL commits follow the server's own setting (`on`
    /// unless changed) and SQLite runs `synchronous = FULL`: every count
    /// waits for the disk. MySQL and MariaDB follow the server's
    /// `innodb_flush_log_at_trx_commit`, which a session cannot change.
    pub fn durable_commits(mut self, durable: bool) -> Self {
        self.durable_commits = durable;
        self
    }

    /// Creates or upgrades the table and its indexes. Needs no secret.
    /// Its statements wait for the disk whatever `durable_commits` says: a
    /// table is not a count, and one lost to a crash would refuse `connect`.
    pub async fn migrate(self) -> Result<(), StoreError> {
        let table = migrate::check_table_name(&self.table)?;
        let db = self.for_migration().open().await?;
        on_backend!(&db, b => b.migrate(&table).await)
    }

    /// These settings as [`migrate`](Self::migrate) opens with them: its
    /// commits wait for the disk.
    fn for_migration(self) -> Self {
        DatabaseStoreBuilder { durable_commits: true, ..self }
    }

    /// Connects, checks the table exists, and starts the sweeper.
    pub async fn connect(self) -> Result<DatabaseStore, StoreError> {
        let secret = match &self.secret {
            Some(secret) => Secret::new(secret.expose())?,
            None => {
                return Err(StoreError::setup(
                    "the database store needs the site secret: set LIMIT_STORE_SECRET (or rate_limit.secret \
                     in limit-store.toml; in code, the builder's .secret()) to a random string of at least 32 \
                     bytes, as `openssl rand -base64 48` prints",
                ))
            }
        };
        migrate::check_table_name(&self.table)?;
        #[cfg(feature = "sqlite")]
        if matches!(kind_of(&self.url)?, Kind::Sqlite) {
            super::sqlite::Sqlite::refuse_missing_file(&self.url, &self.table)?;
        }
        let db = self.open().await?;
        on_backend!(&db, b => b.check_table().await)?;
        on_backend!(&db, b => b.check_family_column().await)?;
        let live = on_backend!(&db, b => b.count_live(secret.generation()).await)?;
        let bound = SharedBound::new("database", self.max_entries, live);
        let shared = Arc::new(Shared {
            db,
            tally: attempt::Tally::default(),
            secret,
            bound,
            families: crate::bound::FamilyTags::new(),
            sweeper: Default::default(),
        });
        if let Some(every) = self.sweep_every {
            // The sweeper holds a `Weak`, so `Arc::get_mut` would fail here:
            // the handle goes in a cell that is set once.
            let _ = shared.sweeper.set(sweep::spawn(Arc::downgrade(&shared), every));
        }
        Ok(DatabaseStore { shared })
    }

    async fn open(&self) -> Result<Db, StoreError> {
        let kind = kind_of(&self.url)?;
        let table = self.table.clone();
        let n = self.max_connections;
        Ok(match kind {
            #[cfg(feature = "sqlite")]
            Kind::Sqlite => Db::Sqlite(super::sqlite::Sqlite::open(&self.url, table, n, self.durable_commits).await?),
            #[cfg(feature = "postgres")]
            Kind::Postgres => Db::Postgres(Box::new(
                super::postgres::Postgres::open(&self.url, table, n, self.remember_rows, self.durable_commits).await?,
            )),
            #[cfg(feature = "mysql")]
            Kind::Mysql => {
                Db::Mysql(Box::new(super::mysql::Mysql::open(&self.url, table, n, self.remember_rows).await?))
            }
            #[allow(unreachable_patterns)]
            _ => unreachable!("kind_of refuses backends not compiled in"),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::DatabaseStore;

    /// A migration's statements wait for the disk even when the store's
    /// counts do not (the default), and the rest of the settings stay.
    #[test]
    fn a_migration_waits_for_the_disk_whatever_the_counts_do() {
        for durable in [false, true] {
            let b = DatabaseStore::builder("sqlite::memory:").table("t_migrate").durable_commits(durable);
            let m = b.for_migration();
            assert!(m.durable_commits, "durable_commits({durable})");
            assert_eq!(m.table, "t_migrate");
        }
    }
}
