//! The SQLite store's upkeep on rusqlite, with the statements every backend
//! shares (`../upkeep.rs`): migrating, the checks at connect, sweeping in
//! batches and counting live rows. All but migrations run on the store's
//! connections for reads ([`Pool`](super::pool::Pool)).

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};

use super::super::error::Failure;
use super::super::migrate::{self, SQLITE};
use super::super::sweep::BATCH;
use super::super::{upkeep, Census};
use super::file::DbFile;
use super::{Sqlite, NOW};
use crate::StoreError;

/// How long a migration waits for another process's migration (or any
/// other write) to end: a migration runs at start or from the command line,
/// where no request waits for it, and may build an index on a large table.
const MIGRATION_WAIT: Duration = Duration::from_secs(60);

impl Sqlite {
    /// Creates or upgrades the table, in one `BEGIN IMMEDIATE` transaction
    /// on a connection of its own: two processes migrating at once take
    /// turns, and the second finds the first one's migrations recorded.
    pub(in super::super) async fn migrate(&self, table: &str) -> Result<(), StoreError> {
        let (file, table) = (self.file.clone(), table.to_owned());
        let migrated = tokio::task::spawn_blocking(move || migrate_file(&file, &table)).await;
        match migrated {
            Ok(done) => done.map_err(|e| Failure::from(e).settled("migrate")),
            Err(e) => Err(StoreError::setup(format!("the SQLite migration panicked: {e}"))),
        }
    }

    /// Refuses a database file that is not there, before anything creates
    /// it: a store counts only in a migrated table, and the empty file it
    /// would leave behind looks like a database that lost its table.
    pub(in super::super) fn refuse_missing_file(url: &str, table: &str) -> Result<(), StoreError> {
        let file = DbFile::of_url(url, false)?;
        if file.path.exists() {
            return Ok(());
        }
        Err(migrate::missing_table(table, &crate::secret::redact(url)))
    }

    /// Refuses a database without the table.
    pub(in super::super) async fn check_table(&self) -> Result<(), StoreError> {
        let table = self.table.clone();
        let sql = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?";
        let n: i64 =
            self.upkeep("look for the table", move |conn| conn.query_row(sql, [table], |row| row.get(0))).await?;
        if n > 0 {
            Ok(())
        } else {
            Err(migrate::missing_table(&self.table, &self.url_hint))
        }
    }

    /// Refuses a table whose migrations stop before the `family` column
    /// (a store of an older version made it): every insert writes it.
    pub(in super::super) async fn check_family_column(&self) -> Result<(), StoreError> {
        let sql = upkeep::family_column(&self.table);
        let found = self.upkeep("look for the family column", move |conn| Ok(conn.prepare(&sql).is_ok())).await?;
        if found {
            Ok(())
        } else {
            Err(migrate::not_migrated(&self.table, &self.url_hint))
        }
    }

    /// This generation's live rows, in all and per family tag.
    pub(in super::super) async fn count_families(&self, generation: i64) -> Result<Census, StoreError> {
        let sql = upkeep::count_families(&self.table, NOW, "?");
        let groups = self
            .upkeep("count live entries", move |conn| {
                let mut statement = conn.prepare_cached(&sql)?;
                let groups = statement.query_map([generation], |row| Ok((row.get(0)?, row.get(1)?)))?;
                groups.collect::<rusqlite::Result<Vec<(Option<i16>, i64)>>>()
            })
            .await?;
        Ok(Census::of(groups))
    }

    pub(in super::super) async fn count_live(&self, generation: i64) -> Result<u64, StoreError> {
        let sql = upkeep::count_live(&self.table, NOW, "?");
        self.scalar("count live entries", sql, generation).await
    }

    /// Live rows of every generation that expire within `within_ms`.
    pub(in super::super) async fn count_expiring(&self, within_ms: i64) -> Result<u64, StoreError> {
        let sql = upkeep::count_expiring(&self.table, NOW, "?");
        self.scalar("count expiring entries", sql, within_ms).await
    }

    pub(in super::super) async fn generations(&self) -> Result<Vec<(i64, u64)>, StoreError> {
        let sql = upkeep::generations(&self.table, NOW);
        let rows = self
            .upkeep("count generations", move |conn| {
                let mut statement = conn.prepare_cached(&sql)?;
                let rows = statement.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
                rows.collect::<rusqlite::Result<Vec<(i64, i64)>>>()
            })
            .await?;
        Ok(rows.into_iter().map(|(g, n): (i64, i64)| (g, n.unsigned_abs())).collect())
    }

    /// Expired rows of every generation, at most [`BATCH`] a statement (by
    /// the index on `expires_at`), until a batch comes short: no statement
    /// holds the write lock long.
    pub(in super::super) async fn sweep(&self) -> Result<u64, StoreError> {
        let t = &self.table;
        let sql = format!(
            "DELETE FROM {t} WHERE key_hash IN (SELECT key_hash FROM {t} WHERE expires_at <= {NOW} LIMIT {BATCH}) \
             AND expires_at <= {NOW}"
        );
        let mut removed = 0;
        loop {
            let sql = sql.clone();
            let n = self.upkeep("sweep", move |conn| conn.prepare_cached(&sql)?.execute([])).await?;
            let n = u64::try_from(n).unwrap_or(u64::MAX);
            removed += n;
            if n < BATCH.unsigned_abs() {
                return Ok(removed);
            }
        }
    }

    /// The count one statement with one parameter answers.
    async fn scalar(&self, what: &'static str, sql: String, param: i64) -> Result<u64, StoreError> {
        let n: i64 =
            self.upkeep(what, move |conn| conn.prepare_cached(&sql)?.query_row([param], |row| row.get(0))).await?;
        Ok(n.unsigned_abs())
    }

    /// Runs `work` on one of the store's connections for reads.
    async fn upkeep<T: Send + 'static>(
        &self,
        what: &'static str,
        work: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.conns.run(move |conn| Ok(work(conn)?)).await.map_err(|f| f.settled(what))
    }
}

/// The migrations `table` lacks, and their record, in one transaction.
fn migrate_file(file: &DbFile, table: &str) -> rusqlite::Result<()> {
    let conn = file.open_waiting(MIGRATION_WAIT)?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = migrate_on(&conn, table).and_then(|()| conn.execute_batch("COMMIT"));
    if done.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    done
}

fn migrate_on(conn: &Connection, table: &str) -> rusqlite::Result<()> {
    conn.execute(&upkeep::migrations_log(table, "INTEGER"), [])?;
    let applied = upkeep::applied(table, "?");
    let record = format!("INSERT OR IGNORE INTO {table}_migrations (version) VALUES (?)");
    for migration in SQLITE {
        let done: Option<i64> = conn.query_row(&applied, [migration.version], |row| row.get(0)).optional()?;
        if done.is_some() {
            continue;
        }
        for statement in migrate::statements(migration, table) {
            match conn.execute(&statement, []) {
                Ok(_) => {}
                // The change is there though not recorded (its record was lost).
                Err(e) if e.to_string().starts_with("duplicate column name") => {}
                Err(e) => return Err(e),
            }
        }
        conn.execute(&record, params![migration.version])?;
    }
    Ok(())
}
