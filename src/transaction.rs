//! The marker an app puts around its own database transactions, so that no
//! count is ever made inside one: a rollback must never undo a count.
//!
//! ```
//! # async fn demo() {
//! limit_store::in_transaction(async {
//!     // the app's own transaction; a database-store call here is refused
//! })
//! .await;
//! # }
//! ```

use std::future::Future;

use crate::error::Refusal;
use crate::StoreError;

tokio::task_local! {
    static IN_TRANSACTION: ();
}

/// Runs `work` marked as inside one of the app's own transactions: a database
/// store (or limit) called from it refuses with [`Refusal::InTransaction`].
pub async fn in_transaction<F: Future>(work: F) -> F::Output {
    IN_TRANSACTION.scope((), work).await
}

/// True inside [`in_transaction`].
pub fn is_in_transaction() -> bool {
    IN_TRANSACTION.try_with(|_| ()).is_ok()
}

/// Refuses when called inside [`in_transaction`].
pub fn refuse_in_transaction() -> Result<(), StoreError> {
    if is_in_transaction() {
        return Err(Refusal::InTransaction.into());
    }
    Ok(())
}
