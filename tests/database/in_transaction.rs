//! The marker around the app's own transactions (`in_transaction`): a call
//! of the database store inside one is refused, whichever way it comes, and
//! counts nothing, since a rollback must never undo a count.

use std::sync::Arc;

use crate::common::db::{databases, drop_table, put, SECRET};
use crate::store::store;
use limit_store::error::RefusedInput;
use limit_store::{in_transaction, Entry, Guarded, LimitStore, Write};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_inside_the_apps_transaction_are_refused() {
    for (url, table) in databases("intx") {
        let db = Arc::new(store(&url, &table, SECRET).await);
        // Bare, and through the guard, which runs a call with a borrowed
        // `apply` in a task of its own: the marker goes with it.
        let guarded = Guarded::new(db.clone());
        for (how, store) in [("bare", &*db as &dyn LimitStore), ("guarded", &guarded)] {
            let refused = |err: limit_store::StoreError, what: &str| {
                let inside = matches!(err, limit_store::StoreError::Refused(RefusedInput::InTransaction));
                assert!(inside, "{url}, {how}, {what}: {err}");
            };
            refused(in_transaction(put(store, "k", 1, 60_000)).await.unwrap_err(), "update");
            let owned = store.update_owned(&["k"], Box::new(|rows: &[Option<Entry>], _| vec![Write::Keep; rows.len()]));
            refused(in_transaction(owned).await.unwrap_err(), "update_owned");
            refused(in_transaction(store.read(&["k"])).await.unwrap_err(), "read");
            assert_eq!(store.read(&["k"]).await.unwrap(), vec![None], "{url}, {how}: nothing was counted");
        }
        put(&guarded, "k", 1, 60_000).await.expect("outside the transaction it counts");
        drop_table(&url, &table).await;
    }
}
