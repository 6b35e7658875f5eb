//! A linearizability checker for limit stores: record a history of
//! concurrent calls, then check that some order of them, one at a time,
//! explains every answer.
//!
//! The contract says updates are atomic and every handle sees the same
//! entries. Counting cases check the totals; this checks every answer along
//! the way: each call took effect at one instant between its invoke and its
//! return, in an order where each update saw what the ones before it left and
//! each read answered it ([Wing & Gong]'s definition, searched as [Porcupine]
//! does, with Lowe's memo). Operations are split by the keys they touch, so a
//! history of many keys with tens of operations each checks in milliseconds.
//!
//! Crate-private: the cases `*_histories_are_linearizable` use it so.
//!
//! ```ignore
//! use limit_store::testing::linearizable::{check, History};
//! use limit_store::{Entry, LimitStore, Millis, Write};
//!
//! async fn counts(store: &dyn LimitStore) {
//!     let history = History::new();
//!     // From several tasks, on several handles:
//!     history
//!         .update(store, &["k"], &mut |seen: &[Option<Entry>], now: Millis| {
//!             let n = seen[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0);
//!             vec![Write::Put(Entry { value: (n + 1).into(), expires_at: now + 3_600_000 })]
//!         })
//!         .await
//!         .unwrap();
//!     history.read(store, &["k"]).await.unwrap();
//!     // Then, once every task is done:
//!     check(&history.operations()).unwrap();
//! }
//! ```
//!
//! [Wing & Gong]: https://doi.org/10.1006/jpdc.1993.1015
//! [Porcupine]: https://github.com/anishathalye/porcupine

mod check;
mod history;
mod model;

pub use check::check;
pub use history::History;

#[cfg(test)]
mod tests;
