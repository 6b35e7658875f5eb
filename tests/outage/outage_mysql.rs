//! A real MariaDB outage under load: the server shut down (`mysqladmin
//! shutdown`) for 5 s while 16 tasks count through `Guarded`, then started
//! again as `.ci/run` starts it. Every call is answered within 2.5 s, counting
//! resumes on the same store (no new store, no new pool), and no acknowledged
//! count is lost.
//!
//! It runs alone (`alone`), so that no other test uses the server while it is
//! down; a guard starts the server again even if the test fails.

use std::sync::Arc;
use std::time::Duration;

use crate::common::db::{rand_suffix, server, SECRET};
use crate::common::load::{check_after_outage, Load};
use crate::common::servers::stop_mariadb;
use limit_store::{DatabaseStore, Guarded, LimitStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_shut_down_for_five_seconds_under_load_loses_no_acknowledged_count() {
    let _alone = crate::alone().await;
    let Some(url) = server("LIMIT_STORE_TEST_MYSQL") else { return };
    let table = "limit_store_outage_stop";
    DatabaseStore::builder(&url).table(table).migrate().await.unwrap();
    let store = DatabaseStore::builder(&url).table(table).secret(SECRET).sweep_every(None).connect().await.unwrap();
    let store = Arc::new(Guarded::new(Arc::new(store) as Arc<dyn LimitStore>));
    let load = Load::start(store.clone(), &format!("mariadb-stop-{}", rand_suffix()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    {
        let _restarts = stop_mariadb();
        tokio::time::sleep(Duration::from_secs(5)).await;
    } // started again here, and answering
    load.server_is_back();
    let tallies = load.finish().await;
    check_after_outage(&store, &tallies).await;
}
