//! A real MariaDB restart under load: no call that begins once the server
//! answers again fails, and no count is lost or made twice (see
//! `restart_under_load`). This binary holds one test, so that no other test
//! of it uses the server while it restarts; a guard starts the server again
//! even if the test fails.

mod common;
mod restart_under_load;

use common::db::{rand_suffix, server, SECRET};
use common::servers::{start_mariadb, stop_mariadb, RestartsMariadb};
use limit_store::DatabaseStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_restarted_under_load_fails_no_call_after_it_is_back() {
    let Some(url) = server("LIMIT_STORE_TEST_MYSQL") else { return };
    let table = "limit_store_restart_load";
    DatabaseStore::builder(&url).table(table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(table).secret(SECRET).max_connections(16).sweep_every(None);
    let store = store.connect().await.unwrap();
    restart_under_load::restart_under_load(store, &format!("mariadb-restart-{}", rand_suffix()), || {
        let restarts = RestartsMariadb;
        assert!(stop_mariadb(), "mysqladmin shutdown");
        // The old server may still be on its way out when the first start
        // is tried (then it does nothing): try again.
        assert!((0..3).any(|_| start_mariadb()), "mariadbd started again");
        drop(restarts);
    })
    .await;
}
