//! The one unsafe spot of the crate: lending a caller's borrowed closure to
//! work that may outlive the borrow — a spawned task ([`crate::Guarded`]'s
//! `apply`) or a blocking thread (the SQLite store's `decide`).
//!
//! The closures lent are `dyn FnMut(&[T], Millis) -> R + Send`: [`crate::Apply`]
//! is one, the database store's `Decide` another.
//!
//! The [`Lender`] holds the caller's `&mut` borrow for as long as it lives, and
//! its `Drop` clears the cell under the cell's lock, waiting for a call that is
//! running. The [`Borrower`] calls the closure only under that lock and only
//! while the cell is full; once it is closed, [`Borrower::call`] answers `None`
//! and the borrower decides what a late call means (`Keep` for every key, or an
//! error and nothing written). So the closure is called only while the borrow is
//! alive, and never by two threads at once. The closure is `Send`, so calling it
//! from another thread is sound.
//!
//! Like every scoped-spawn design, this relies on the caller's future being
//! dropped or finished, never leaked with `mem::forget` after it was polled:
//! a leaked future would never close the cell.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::Millis;

/// A closure that may be lent: sees rows of `T` and the store's clock.
pub(crate) type Lendable<'a, T, R> = dyn FnMut(&[T], Millis) -> R + Send + 'a;

struct Raw<T: 'static, R: 'static>(*mut Lendable<'static, T, R>);
// SAFETY: the pointee is `Send` (`Lendable` requires it), and it is reached only
// under the cell's mutex while the lender's borrow is alive (see module docs).
unsafe impl<T, R> Send for Raw<T, R> {}

type Cell<T, R> = Arc<Mutex<Option<Raw<T, R>>>>;

/// Held by the caller; closes the cell when dropped.
pub(crate) struct Lender<'a, T: 'static, R: 'static> {
    cell: Cell<T, R>,
    _borrow: PhantomData<&'a mut ()>,
}

/// Held by the work that may outlive the caller; `'static`.
pub(crate) struct Borrower<T: 'static, R: 'static>(Cell<T, R>);

/// Lends `f` until the returned [`Lender`] is dropped.
pub(crate) fn lend<'a, T, R>(f: &'a mut Lendable<'_, T, R>) -> (Lender<'a, T, R>, Borrower<T, R>) {
    let ptr: *mut Lendable<'_, T, R> = f;
    // SAFETY: only the trait object's lifetime bound changes (same layout);
    // the pointer is used only while `Lender<'a>` is alive.
    let ptr: *mut Lendable<'static, T, R> = unsafe { std::mem::transmute(ptr) };
    let cell: Cell<T, R> = Arc::new(Mutex::new(Some(Raw(ptr))));
    (Lender { cell: cell.clone(), _borrow: PhantomData }, Borrower(cell))
}

impl<T, R> Drop for Lender<'_, T, R> {
    fn drop(&mut self) {
        *self.cell.lock() = None;
    }
}

impl<T, R> Borrower<T, R> {
    /// Calls the lent closure while it is lent; `None` once the lender is gone.
    pub(crate) fn call(&self, rows: &[T], now: Millis) -> Option<R> {
        let lent = self.0.lock();
        // SAFETY: the cell is full, so the lender (and the caller's borrow) is
        // alive, and the lock keeps this the only use of the pointer.
        lent.as_ref().map(|raw| unsafe { (*raw.0)(rows, now) })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::{Apply, Entry, Write};

    /// How `Guarded` uses a borrower: a closed cell means `Keep` for every key.
    fn keep_when_closed(
        borrower: &Borrower<Option<Entry>, Vec<Write>>,
        cur: &[Option<Entry>],
        now: Millis,
    ) -> Vec<Write> {
        borrower.call(cur, now).unwrap_or_else(|| vec![Write::Keep; cur.len()])
    }

    #[test]
    fn a_closed_cell_answers_keep() {
        let mut calls = 0;
        let mut apply = |cur: &[Option<Entry>], _now: Millis| {
            calls += 1;
            vec![Write::Delete; cur.len()]
        };
        let apply: &mut Apply<'_> = &mut apply;
        let (lender, borrower) = lend(apply);
        assert_eq!(keep_when_closed(&borrower, &[None, None], 1), vec![Write::Delete, Write::Delete]);
        drop(lender);
        assert_eq!(keep_when_closed(&borrower, &[None], 2), vec![Write::Keep]);
        assert_eq!(calls, 1);
    }

    #[test]
    fn closing_waits_for_a_running_call() {
        let finished = Arc::new(AtomicBool::new(false));
        let seen = finished.clone();
        let mut apply = move |cur: &[Option<Entry>], _now: Millis| {
            std::thread::sleep(Duration::from_millis(200));
            seen.store(true, Ordering::SeqCst);
            vec![Write::Keep; cur.len()]
        };
        let (lender, borrower) = lend(&mut apply as &mut Apply<'_>);
        let started = Arc::new(std::sync::Barrier::new(2));
        let go = started.clone();
        let t = std::thread::spawn(move || {
            go.wait();
            borrower.call(&[None], 0)
        });
        started.wait();
        std::thread::sleep(Duration::from_millis(50));
        drop(lender); // must wait for the running call
        assert!(finished.load(Ordering::SeqCst), "the lender closed while apply was running");
        t.join().unwrap();
    }

    /// How the SQLite store uses a borrower: a closure with borrowed state and
    /// a fallible answer, called from a blocking thread; once the caller is
    /// gone the thread sees `None` (and writes nothing), never the closure.
    #[test]
    fn a_blocking_thread_never_calls_a_closure_whose_caller_is_gone() {
        let mut decided = Vec::new();
        let limit = 2_usize;
        let mut decide = |rows: &[Option<String>], now: Millis| -> Result<usize, String> {
            decided.push(now);
            if rows.len() > limit {
                Err("too many".into())
            } else {
                Ok(rows.iter().flatten().count())
            }
        };
        let (lender, borrower) = lend(&mut decide as &mut Lendable<'_, Option<String>, Result<usize, String>>);
        let (ask, asked) = std::sync::mpsc::channel::<Millis>();
        let (answer, answers) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            for now in asked {
                answer.send(borrower.call(&[Some("a".into()), None], now)).unwrap();
            }
        });
        ask.send(1).unwrap();
        assert_eq!(answers.recv().unwrap(), Some(Ok(1)));
        drop(lender);
        ask.send(2).unwrap();
        assert_eq!(answers.recv().unwrap(), None, "a closed cell is not called");
        drop(ask);
        t.join().unwrap();
        assert_eq!(decided, vec![1]);
    }
}
