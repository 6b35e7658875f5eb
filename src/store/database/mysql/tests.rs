use super::super::attempt::guesses_follow_the_clock;
use super::super::row::add_one;
use super::*;

/// A store on a table of its own, `{prefix}_{pid}`, migrated; `None`
/// without a MySQL server to test on.
async fn store_on_new_table(prefix: &str) -> Option<(Mysql, String)> {
    let Ok(url) = std::env::var("LIMIT_STORE_TEST_MYSQL") else {
        eprintln!("LIMIT_STORE_TEST_MYSQL is not set: skipping this database test (.ci/run sets it)");
        return None;
    };
    let table = format!("{prefix}_{}", std::process::id());
    crate::DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    Some((Mysql::open(&url, table.clone(), 2, 100).await.unwrap(), table))
}

/// One count of `n + 1` on `hash` by the optimistic path; the clock each
/// run of `decide` was given goes to `nows`.
async fn count(my: &Mysql, hash: &KeyHash, nows: &mut Vec<Millis>) -> Tried {
    let mut decide = add_one(nows);
    match my.try_optimistic(hash, 1, &mut decide).await {
        Ok(tried) => tried,
        Err(_) => panic!("the count failed"),
    }
}

/// A guess made on a clock estimate outside [estimate - 2 ms, estimate +
/// 50 ms] of the server's clock writes nothing, nor does one on a row
/// that changed: the count reads the row and the clock and goes on from
/// those, so `apply` is never left with a row or a clock the database
/// disagrees with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guess_on_a_wrong_clock_or_a_changed_row_writes_nothing() {
    let Some((my, table)) = store_on_new_table("ls_my_guess").await else { return };
    let hash = [7u8; 32];
    let mut nows = Vec::new();
    guesses_follow_the_clock(&my.clock, async || count(&my, &hash, &mut nows).await).await;
    let mut conn = my.pool.acquire().await.unwrap();
    sqlx::query(&format!("UPDATE {table} SET value = '100'")).execute(&mut *conn).await.unwrap();
    assert_eq!(count(&my, &hash, &mut nows).await, Tried::ReadThenWrite, "another instance changed the row");
    let row: (String, i64) =
        sqlx::query_as(&format!("SELECT CAST(value AS CHAR), {NOW} FROM {table}")).fetch_one(&mut *conn).await.unwrap();
    assert_eq!(row.0, "101", "every count landed once, the last on the changed row");
    assert!((row.1 - nows[nows.len() - 1]).abs() < 5_000, "apply's clock was the database's: {nows:?}");
    drop_tables(conn, &table).await;
}

/// A key this store has not seen is guessed to have no row, and inserted
/// in one statement; while such keys tend to have rows, it is read first
/// instead, and keys without rows turn the store back to guessing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_rows_tend_to_be_there_a_new_key_reads_first() {
    let Some((my, table)) = store_on_new_table("ls_my_first").await else { return };
    let mut nows = Vec::new();
    my.check_table().await.unwrap(); // reads the clock, as connecting does
    assert_eq!(count(&my, &[1u8; 32], &mut nows).await, Tried::OneStatement, "the guess: no row");
    for _ in 0..3 {
        my.read_first.note_row(true);
    }
    assert_eq!(count(&my, &[2u8; 32], &mut nows).await, Tried::ReadThenWrite, "read first");
    assert_eq!(count(&my, &[3u8; 32], &mut nows).await, Tried::ReadThenWrite, "read first, still");
    assert_eq!(count(&my, &[4u8; 32], &mut nows).await, Tried::OneStatement, "no rows there: guessing again");
    let conn = my.pool.acquire().await.unwrap();
    drop_tables(conn, &table).await;
}

/// Drops `table` and its migrations' table.
async fn drop_tables(mut conn: super::super::conns::Conn<MySqlConnection>, table: &str) {
    for t in [table.to_owned(), format!("{table}_migrations")] {
        sqlx::query(&format!("DROP TABLE {t}")).execute(&mut *conn).await.unwrap();
    }
    conn.release();
}
