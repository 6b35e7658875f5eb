//! PostgreSQL's sweep, by pages: the table has no index on `expires_at` (every
//! count changes it, and an indexed column would keep every update from
//! staying on its row's page: see `migrations/postgres/0002_heap_only_updates.sql`),
//! so the sweep reads the table a few pages per statement (a TID range scan,
//! PostgreSQL 14 or later; older servers scan the table for each) and deletes
//! the expired rows it finds there, skipping rows a count holds. After a
//! sweep that removed many rows it vacuums the table, so the next rows fill
//! the room the removed ones left instead of new pages.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};

use super::super::error::db_error;
use super::super::sweep::BATCH;
use super::{Postgres, NOW};
use crate::StoreError;

/// Pages one sweep statement reads: some hundreds of rows.
const PAGES: i64 = 16;

/// The statements of a sweep by pages on table `t`.
#[derive(Debug)]
pub(super) struct Pages {
    /// The table's pages now.
    count: String,
    /// Deletes the expired rows of pages `$1` up to `$2` that no count holds
    /// (the rows it locks keep their place until the delete, in the same
    /// statement: a TID scan finds them).
    delete: String,
    /// `VACUUM` of the table.
    vacuum: String,
    /// A connection of its own for `VACUUM`, which may take longer than the
    /// store's sessions allow a statement.
    options: PgConnectOptions,
}

impl Pages {
    pub(super) fn new(t: &str, options: PgConnectOptions) -> Self {
        let page = |p: &str| format!("format('(%s,0)', {p}::int8)::tid");
        Pages {
            count: format!("SELECT pg_relation_size('{t}') / current_setting('block_size')::int8"),
            delete: format!(
                "DELETE FROM {t} WHERE ctid = ANY(ARRAY( \
                   SELECT ctid FROM {t} WHERE ctid >= {} AND ctid < {} AND expires_at <= {NOW} \
                   FOR UPDATE SKIP LOCKED)) \
                 AND expires_at <= {NOW}",
                page("$1"),
                page("$2")
            ),
            vacuum: format!("VACUUM {t}"),
            options: options.options([("lock_timeout", "2000"), ("statement_timeout", "120000")]),
        }
    }
}

impl Postgres {
    /// Removes the expired rows of every generation, [`PAGES`] pages at a
    /// time; then, when that was at least [`BATCH`] rows, vacuums the table.
    pub(in super::super) async fn sweep(&self) -> Result<u64, StoreError> {
        let failed = |e| db_error("sweep", e);
        let pages: i64 = {
            let mut conn = self.pool.acquire().await.map_err(failed)?;
            let pages = sqlx::query_scalar(&self.pages.count).fetch_one(&mut *conn).await.map_err(failed)?;
            conn.release();
            pages
        };
        let mut removed = 0;
        // Pages added meanwhile hold rows written since: not expired yet.
        for from in (0..pages).step_by(PAGES.unsigned_abs().try_into().unwrap_or(1)) {
            let mut conn = self.pool.acquire().await.map_err(failed)?;
            let done = sqlx::query(&self.pages.delete)
                .bind(from)
                .bind(from + PAGES)
                .execute(&mut *conn)
                .await
                .map_err(failed)?;
            conn.release();
            removed += done.rows_affected();
        }
        if removed >= BATCH.unsigned_abs() {
            if let Err(e) = self.vacuum().await {
                tracing::warn!(
                    kind = crate::log::Kind::VacuumFailed.as_str(),
                    error = %e,
                    "limit store could not vacuum its table after a sweep; autovacuum will"
                );
            }
        }
        Ok(removed)
    }

    /// `VACUUM` of the table, on a connection of its own.
    async fn vacuum(&self) -> Result<(), sqlx::Error> {
        let mut conn: PgConnection = self.pages.options.connect().await?;
        let done =
            tokio::time::timeout(Duration::from_secs(120), sqlx::query(&self.pages.vacuum).execute(&mut conn)).await;
        let _ = conn.close().await;
        match done {
            Ok(done) => done.map(|_| ()),
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }
}
