//! PostgreSQL's one-statement tries (see `last_seen.rs`): a one-key count runs
//! `apply` on the row this store remembers, or on no row for a key it has
//! not seen (the common case after a deploy or a restart, or with many
//! instances), at its estimate of the database's clock, and writes with one
//! statement that checks both. A key's first count is then one round trip
//! when its row is missing, as the guess says. When the guess missed (a row
//! this store never saw, or one another instance changed), the statement
//! has read the row and the clock, and the second try writes from those,
//! conditionally, alone or, under load, with the others waiting
//! ([`Replacer`]); if the row changed yet again, the locked transaction
//! settles it. Neither the memory nor the estimate is trusted: the count is
//! exact across instances whatever they hold. While keys not seen before
//! tend to have rows, or with no place for a guess alone, a count reads its
//! row first instead (see `read_first.rs` and `reader.rs`).

use sqlx::Row;

use super::super::attempt::{Guess, Tried};
use super::super::error::Failure;
use super::super::row::{decide_one, row_after, Decide, KeyHash, RowWrite, Stored};
use super::super::upkeep::{latest_now, match_rows};
use super::replace::{Replace, Replaced};
use super::{Postgres, NOW};
use crate::error::Unavailable;
use crate::server_clock::{MAX_LAG_MS, MAX_LEAD_MS};
use crate::StoreError;

/// The one-statement tries (see `last_seen.rs`). Each writes only if the row is
/// as remembered and the clock within bounds of the estimate `apply` was
/// given, and answers `done` with the row and the clock as they were before
/// it, so a miss is also the read the count needs next.
#[derive(Debug)]
pub(super) struct GuessStatements {
    /// No row remembered: insert, unless a row is there.
    insert: String,
    /// Replace the remembered row (alone; see [`Replacer`] for the rest).
    replace: String,
    /// Delete the remembered row.
    delete: String,
    /// Nothing to write: confirm the row is as remembered.
    keep: String,
    /// Nothing to write and no row remembered: confirm there is none.
    keep_absent: String,
}

impl GuessStatements {
    pub(super) fn new(t: &str) -> Self {
        // `$est` is the estimate `apply` was given.
        let clock = |est: &str| format!("{NOW} BETWEEN {est} - {MAX_LEAD_MS} AND {est} + {MAX_LAG_MS}");
        let then = |done: &str| {
            format!(
                "SELECT {done} AS done, {NOW} AS now, r.key_hash, r.generation, r.value, r.expires_at \
                 FROM (SELECT 1) AS one LEFT JOIN {t} AS r ON r.key_hash = $1"
            )
        };
        let counted = then("(SELECT count(*) FROM w)");
        GuessStatements {
            insert: format!(
                "WITH w AS (INSERT INTO {t} (key_hash, generation, value, expires_at, family) \
                 SELECT $1::bytea, $2::int8, $3::text, $4::int8, $6::int2 WHERE {} \
                 ON CONFLICT (key_hash) DO NOTHING RETURNING 1) {counted}",
                clock("$5::int8")
            ),
            replace: format!(
                "WITH w AS (UPDATE {t} SET generation = $2, value = $3, expires_at = $4, family = $9::int2 \
                 WHERE key_hash = $1 AND generation = $5 AND value = $6 AND expires_at = $7 AND {} \
                 RETURNING 1) {counted}",
                clock("$8::int8")
            ),
            delete: format!(
                "WITH w AS (DELETE FROM {t} \
                 WHERE key_hash = $1 AND generation = $2 AND value = $3 AND expires_at = $4 AND {} \
                 RETURNING 1) {counted}",
                clock("$5::int8")
            ),
            keep: then(&format!(
                "(CASE WHEN r.generation = $2 AND r.value = $3 AND r.expires_at = $4 AND {} THEN 1 ELSE 0 END)::int8",
                clock("$5::int8")
            )),
            keep_absent: then(&format!(
                "(CASE WHEN r.key_hash IS NULL AND {} THEN 1 ELSE 0 END)::int8",
                clock("$2::int8")
            )),
        }
    }
}

impl Postgres {
    /// One optimistic try on one key: a guess, else a read; then a second,
    /// conditional write from the row and the clock read. `Changed` when
    /// the row changed in between (nothing was written).
    pub(super) async fn try_optimistic(
        &self,
        hash: &KeyHash,
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Result<Tried, Failure> {
        let (row, now) = match self.guess(hash, generation, decide).await? {
            Guess::Done => return Ok(Tried::OneStatement),
            Guess::Missed { row, now } => (row, now),
            Guess::NotTried => {
                // No clock estimate, or no place for a guess alone: read,
                // with the others reading at the same time (see `reader.rs`).
                let (row, now) = match self.reader.read(*hash).await {
                    Some((row, now)) => {
                        self.clock.reading(now);
                        (row, now)
                    }
                    // The read failed: alone then, to meet the error there.
                    None => {
                        let mut conn = self.pool.acquire().await?;
                        let (rows, now) = self.read_rows(&mut conn, std::slice::from_ref(hash)).await?;
                        conn.release();
                        (rows.into_iter().next().flatten(), now)
                    }
                };
                self.read_first.note_row(row.is_some());
                if row.is_none() {
                    // A new row is inserted alone, never in a batch (see `guess`).
                    let mut conn = self.pool.acquire().await?;
                    let done = self.write_if(&mut conn, hash, generation, row, now, decide).await?;
                    conn.release();
                    return Ok(if done { Tried::ReadThenWrite } else { Tried::Changed });
                }
                // A row that is there is replaced as a missed guess's is:
                // with the others waiting when the server is busy.
                (row, now)
            }
        };
        let write = decide_one(decide, &row, now).map_err(Failure::Store)?;
        let done = self.second_try(hash, generation, row, write).await?;
        Ok(if done { Tried::ReadThenWrite } else { Tried::Changed })
    }

    /// The write after a missed guess, decided from the row and the clock its
    /// statement read: with the others waiting when a few statements are
    /// out already, as a guess would go, else alone; either way only if the
    /// row is still `row`.
    async fn second_try(
        &self,
        hash: &KeyHash,
        generation: i64,
        row: Option<Stored>,
        write: RowWrite,
    ) -> Result<bool, Failure> {
        // Reading first (see `read_first.rs`) too, as many go alone as
        // guesses do: with fewer alone, 8 callers' first counts queued behind
        // the guesses, and 32 callers' gained nothing (measured in 710d70e).
        let alone = self.replacer.alone();
        if let (None, RowWrite::Put { value, expires_at, family }) = (&alone, &write) {
            let after = row_after(&row, &write, generation);
            let (value, expires_at, family) = (value.clone(), *expires_at, *family);
            let guess = Replace { hash: *hash, generation, value, expires_at, family, old: row.clone(), est: None };
            match self.replacer.replace(guess).await {
                Ok(Replaced::Done { now }) => {
                    self.clock.reading(now);
                    self.remember(hash, after);
                    return Ok(true);
                }
                Ok(Replaced::Missed { now, .. }) => {
                    self.clock.reading(now);
                    self.remember(hash, None);
                    return Ok(false);
                }
                Ok(Replaced::NotSent) => {} // nothing written: alone, then
                Err(why) => return Err(Failure::Store(StoreError::unavailable(Unavailable::StoreFailed, why))),
            }
        }
        let mut conn = self.pool.acquire().await?;
        let done = self.write_decided(&mut conn, hash, generation, row, write).await?;
        conn.release();
        drop(alone);
        Ok(done)
    }

    /// One statement from the remembered row (or none, for a key this store
    /// has not seen) and the estimated clock: see `last_seen.rs`. A replaced or
    /// inserted row goes with the other guesses waiting at the same time
    /// when a few are out already (see [`Replacer`]).
    pub(super) async fn guess(
        &self,
        hash: &KeyHash,
        generation: i64,
        decide: &mut Decide<'_>,
    ) -> Result<Guess, Failure> {
        let Some(est) = self.clock.estimate() else { return Ok(Guess::NotTried) };
        let seen = self.last_seen.get(hash);
        // A refusal here (full, corrupt, a bad answer) may be of the guess
        // only: the count reads the row and decides again.
        let Ok(write) = decide_one(decide, &seen, est) else { return Ok(Guess::NotTried) };
        let after = row_after(&seen, &write, generation);
        // A place among the guesses out alone, held until the statement answers.
        let mut alone = None;
        let mut inserting = false;
        let g = &self.guess_statements;
        let query = match (seen, write) {
            (Some(old), RowWrite::Put { value, expires_at, family }) => {
                alone = self.replacer.alone();
                if alone.is_none() {
                    let old = Some(old);
                    let guess = Replace { hash: *hash, generation, value, expires_at, family, old, est: Some(est) };
                    return self.guess_with_others(guess, after).await;
                }
                sqlx::query(&g.replace)
                    .bind(&hash[..])
                    .bind(generation)
                    .bind(value)
                    .bind(expires_at)
                    .bind(old.generation)
                    .bind(old.value)
                    .bind(old.expires_at)
                    .bind(est)
                    .bind(family)
            }
            (None, RowWrite::Put { value, expires_at, family }) => {
                if self.read_first.pays() {
                    return Ok(Guess::NotTried); // read first: see `read_first.rs`
                }
                alone = self.replacer.alone();
                if alone.is_none() {
                    // Under load a first count reads first (shared, see
                    // `reader.rs`) instead: an insert in a batch statement
                    // could wait on a multi-key transaction's new row while
                    // holding rows it wants (seen as statement timeouts in the
                    // contract's multi-key cases).
                    return Ok(Guess::NotTried);
                }
                inserting = true;
                sqlx::query(&g.insert)
                    .bind(&hash[..])
                    .bind(generation)
                    .bind(value)
                    .bind(expires_at)
                    .bind(est)
                    .bind(family)
            }
            (Some(old), RowWrite::Delete) => sqlx::query(&g.delete)
                .bind(&hash[..])
                .bind(old.generation)
                .bind(old.value)
                .bind(old.expires_at)
                .bind(est),
            (Some(old), RowWrite::Keep) => {
                sqlx::query(&g.keep).bind(&hash[..]).bind(old.generation).bind(old.value).bind(old.expires_at).bind(est)
            }
            (None, RowWrite::Keep | RowWrite::Delete) => sqlx::query(&g.keep_absent).bind(&hash[..]).bind(est),
        };
        let mut conn = self.pool.acquire().await?;
        let found = query.fetch_all(&mut *conn).await?;
        conn.release();
        drop(alone);
        let now = latest_now(&found)?;
        let done: i64 = match found.first() {
            Some(row) => row.try_get("done")?,
            None => 0,
        };
        let replaced = if done == 1 {
            Replaced::Done { now }
        } else {
            let row = match_rows(&found, std::slice::from_ref(hash))?.into_iter().next().flatten();
            Replaced::Missed { row, now }
        };
        if inserting {
            self.read_first.note_row(matches!(replaced, Replaced::Missed { row: Some(_), .. }));
        }
        Ok(self.answered(hash, after, replaced))
    }

    /// A replace guess sent in one statement with the others waiting.
    async fn guess_with_others(&self, guess: Replace, after: Option<Stored>) -> Result<Guess, Failure> {
        let hash = guess.hash;
        match self.replacer.replace(guess).await {
            Ok(replaced) => Ok(self.answered(&hash, after, replaced)),
            Err(why) => Err(Failure::Store(StoreError::unavailable(Unavailable::StoreFailed, why))),
        }
    }

    /// What a guess's statement answered, alone or with others: its clock
    /// reading is taken, and a written row (`after`) is remembered.
    fn answered(&self, hash: &KeyHash, after: Option<Stored>, replaced: Replaced) -> Guess {
        match replaced {
            Replaced::Done { now } => {
                self.clock.reading(now);
                self.last_seen.set(hash, after);
                Guess::Done
            }
            Replaced::Missed { row, now } => {
                self.clock.reading(now);
                Guess::Missed { row, now }
            }
            Replaced::NotSent => Guess::NotTried,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::attempt::guesses_follow_the_clock;
    use super::super::super::row::add_one;
    use super::super::test_server;
    use super::*;
    use crate::Millis;

    /// A store on a table of its own, `{prefix}_{pid}`, migrated; `None`
    /// without a PostgreSQL server to test on.
    async fn store_on_new_table(prefix: &str) -> Option<(Postgres, String)> {
        let url = test_server()?;
        let table = format!("{prefix}_{}", std::process::id());
        crate::DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
        Some((Postgres::open(&url, table.clone(), 2, 100, false).await.unwrap(), table))
    }

    /// Drops `table` and its migrations' table.
    async fn drop_tables(pg: &Postgres, table: &str) {
        for t in [table.to_owned(), format!("{table}_migrations")] {
            sqlx::query(&format!("DROP TABLE {t}")).execute(&mut *pg.pool.acquire().await.unwrap()).await.unwrap();
        }
    }

    /// One count of `n + 1` on `hash` by the optimistic path; the clock each
    /// run of `decide` was given goes to `nows`.
    async fn count(pg: &Postgres, hash: &KeyHash, nows: &mut Vec<Millis>) -> Tried {
        let mut decide = add_one(nows);
        match pg.try_optimistic(hash, 1, &mut decide).await {
            Ok(tried) => tried,
            Err(_) => panic!("the count failed"),
        }
    }

    /// A guess made on a clock estimate outside [estimate - 2 ms, estimate +
    /// 50 ms] of the database's clock writes nothing: the count reads the
    /// row and the clock and goes on from those, so `apply` is never left
    /// with a clock the database disagrees with.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guess_on_a_wrong_clock_estimate_writes_nothing() {
        let Some((pg, table)) = store_on_new_table("ls_guess_clock").await else { return };
        let hash = [7u8; 32];
        let mut nows = Vec::new();
        guesses_follow_the_clock(&pg.clock, async || count(&pg, &hash, &mut nows).await).await;
        let row: (String, i64) = sqlx::query_as(&format!("SELECT value, {NOW} FROM {table}"))
            .fetch_one(&mut *pg.pool.acquire().await.unwrap())
            .await
            .unwrap();
        assert_eq!(row.0, "5", "every count landed once");
        assert!((row.1 - nows[nows.len() - 1]).abs() < 5_000, "apply's clock was the database's: {nows:?}");
        drop_tables(&pg, &table).await;
    }

    /// While keys not seen before tend to have rows, a new key's count
    /// reads first instead of guessing its row is missing (so even a missing
    /// row takes the read and the write); a key without a row turns the
    /// store back to guessing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn while_rows_tend_to_be_there_a_new_key_reads_first() {
        let Some((pg, table)) = store_on_new_table("ls_guess_first").await else { return };
        let mut nows = Vec::new();
        assert_eq!(count(&pg, &[1u8; 32], &mut nows).await, Tried::ReadThenWrite, "no clock reading yet");
        assert_eq!(count(&pg, &[2u8; 32], &mut nows).await, Tried::OneStatement, "the guess: no row");
        // Two keys without rows so far: three with rows lean it to reading first.
        for _ in 0..3 {
            pg.read_first.note_row(true);
        }
        assert_eq!(count(&pg, &[3u8; 32], &mut nows).await, Tried::ReadThenWrite, "read first");
        assert_eq!(count(&pg, &[4u8; 32], &mut nows).await, Tried::OneStatement, "no row there: guessing again");
        drop_tables(&pg, &table).await;
    }
}
