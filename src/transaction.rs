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
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::RefusedInput;
use crate::StoreError;

tokio::task_local! {
    static IN_TRANSACTION: ();
}

/// How many [`in_transaction`] scopes are open in the process. While none
/// is, no call is inside one, and the check on every count looks no further
/// than this (most apps never open one); while one is, the check asks the
/// task's own marker. A count inside a scope runs after its task opened
/// the scope, so it never reads the number without that scope in it.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// One open scope in [`OPEN`], until dropped (the scope done, or its
/// future dropped before it was).
struct Open;

impl Open {
    fn new() -> Self {
        OPEN.fetch_add(1, Ordering::Relaxed);
        Open
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Runs `work` marked as inside one of the app's own transactions: a database
/// store (or limit) called from it refuses with [`RefusedInput::InTransaction`].
pub async fn in_transaction<F: Future>(work: F) -> F::Output {
    let _open = Open::new();
    IN_TRANSACTION.scope((), work).await
}

/// True inside [`in_transaction`].
#[inline]
pub fn is_in_transaction() -> bool {
    OPEN.load(Ordering::Relaxed) != 0 && IN_TRANSACTION.try_with(|_| ()).is_ok()
}

/// `work` as run on the caller's behalf in another task or thread (the
/// guard's): inside [`in_transaction`] when the caller is, so a store there
/// refuses as it would in the caller's own task. A task-local marker is not
/// inherited by a spawned task; this carries it.
pub(crate) fn on_behalf_of_caller<F: Future>(work: F) -> impl Future<Output = F::Output> {
    let inside = is_in_transaction();
    async move {
        if inside {
            in_transaction(work).await
        } else {
            work.await
        }
    }
}

/// Refuses when called inside [`in_transaction`].
#[inline]
pub fn refuse_in_transaction() -> Result<(), StoreError> {
    if is_in_transaction() {
        return Err(RefusedInput::InTransaction.into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Calls inside a scope are refused, nested or not, and calls outside
    /// every scope are not: while no scope is open anywhere, while another
    /// task holds one open, and after a scope was dropped before it was done.
    #[tokio::test]
    async fn refuses_inside_a_scope_only_whatever_other_tasks_hold_open() {
        assert!(refuse_in_transaction().is_ok());
        assert!(in_transaction(async { refuse_in_transaction() }).await.is_err());
        assert!(in_transaction(in_transaction(async { is_in_transaction() })).await);

        let (open, opened) = tokio::sync::oneshot::channel();
        let (close, closed) = tokio::sync::oneshot::channel::<()>();
        let other = tokio::spawn(in_transaction(async move {
            open.send(is_in_transaction()).unwrap();
            let _ = closed.await;
            is_in_transaction()
        }));
        assert!(opened.await.unwrap(), "inside the other task's open scope");
        assert!(!is_in_transaction(), "outside it, while it is open");
        close.send(()).unwrap();
        assert!(other.await.unwrap());

        let mut dropped = Box::pin(in_transaction(std::future::pending::<()>()));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(dropped.as_mut().poll(&mut cx).is_pending());
        drop(dropped);
        assert!(refuse_in_transaction().is_ok(), "after a scope dropped before it was done");
    }
}
