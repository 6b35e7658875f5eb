//! PostgreSQL ends the sessions of a store's pooled connections moments
//! after they were used (as a fast restart does, here by
//! `pg_terminate_backend`, so the test needs no restart and can't miss the
//! window): each dead connection is too fresh to be pinged, yet no count or
//! read fails, and each count is made exactly once.

use std::time::{Duration, Instant};

use crate::common::db::{rand_suffix, server, SECRET};
use crate::common::load::add_one;
use futures_util::future::join_all;
use limit_store::{DatabaseStore, LimitStore};
use sqlx::{Connection, PgConnection};

/// Callers at once, so the pool holds this many connections.
const CALLERS: usize = 4;

/// Ends the sessions of the idle connections whose last statement named
/// `table` (the store's, and nobody else's), and waits until they are gone;
/// how many there were.
async fn end_sessions(admin: &mut PgConnection, table: &str) -> i64 {
    let like = format!("%{table}%");
    let ended: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE state = 'idle' AND query LIKE $1 AND pid <> pg_backend_pid()",
    )
    .bind(&like)
    .fetch_one(&mut *admin)
    .await
    .unwrap();
    let began = Instant::now();
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()")
                .bind(&like)
                .fetch_one(&mut *admin)
                .await
                .unwrap();
        if left == 0 || began.elapsed() > Duration::from_secs(5) {
            return ended;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_on_connections_whose_sessions_just_ended_do_not_fail() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_POSTGRES") else { return };
    let table = format!("ls_sessions_ended_{}", rand_suffix() % 1_000_000_000);
    DatabaseStore::builder(&url).table(&table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(&table).secret(SECRET).max_connections(8).sweep_every(None);
    let store = store.connect().await.unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let keys: Vec<String> = (0..CALLERS).map(|i| format!("ended-{i}")).collect();
    let (mut acked, mut within_window) = (0u64, 0);
    for round in 0..6 {
        // Every connection used just now, then its session ended.
        for done in join_all(keys.iter().map(|k| add_one(&store, k))).await {
            done.unwrap();
        }
        acked += 1;
        let used = Instant::now();
        let ended = end_sessions(&mut admin, &table).await;
        // The pool pings a connection unused for half a second: the counts
        // below must come before, or they would not meet a dead connection.
        within_window += u32::from(used.elapsed() < Duration::from_millis(400));
        let counts = join_all(keys.iter().map(|k| add_one(&store, k))).await;
        let reads = store.read(&[&keys[0]]).await;
        eprintln!("round {round}: {ended} sessions ended {:?} after their use", used.elapsed());
        for done in counts {
            done.unwrap_or_else(|e| panic!("a count on a connection whose session had ended failed: {e}"));
        }
        acked += 1;
        reads.unwrap_or_else(|e| panic!("a read on a connection whose session had ended failed: {e}"));
    }
    assert!(
        within_window > 0,
        "the sessions were never ended within the window; the machine is too slow for this test"
    );
    for key in &keys {
        let read = store.read(&[key]).await.unwrap();
        assert_eq!(read[0].as_ref().and_then(|e| e.value["n"].as_u64()), Some(acked), "{key}: each count once");
    }
    sqlx::query(&format!("DROP TABLE {table}, {table}_migrations")).execute(&mut admin).await.unwrap();
}
