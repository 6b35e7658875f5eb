//! Counts that arrive while the store is busy with others wait here and go
//! together: in one transaction on SQLite, in one statement on PostgreSQL.
//! That is group commit: under load, one commit (and one round trip) serves
//! many counts, and each count is still atomic and exact on its own.
//!
//! A count that finds the queue idle runs at once, alone, and makes the queue
//! busy; counts that come meanwhile wait. Whoever holds the queue busy takes
//! the waiting counts as its next batch when it is done, and the queue is
//! idle again only when nothing waits. So no count waits for a batch that
//! nobody will run, and a lone caller pays nothing for the queue but a lock.
//!
//! The holder keeps a [`Holding`]: if its work is cancelled before the queue
//! is idle again (its task aborted, its blocking thread never run, the
//! runtime shutting down), dropping it makes the queue idle and lets go of
//! the counts that waited, whose callers then hear at once that nothing ran
//! them, instead of waiting for a batch nobody will run.

use std::sync::Arc;

use parking_lot::Mutex;

/// The counts waiting for the store, and whether a batch is running.
#[derive(Debug)]
pub(super) struct Queue<T> {
    state: Mutex<State<T>>,
}

#[derive(Debug)]
struct State<T> {
    busy: bool,
    waiting: Vec<T>,
}

/// What [`Queue::join`] says.
#[derive(Debug)]
pub(super) enum Joined<T> {
    /// The queue was idle: run this count now; the queue is busy until
    /// [`Queue::next`] answers `None`.
    Run(T),
    /// The count waits, behind this many others; whoever holds the queue
    /// busy will run it.
    Waiting(#[cfg_attr(not(any(feature = "sqlite", feature = "mysql")), allow(dead_code))] usize),
}

impl<T> Queue<T> {
    pub(super) fn new() -> Self {
        Queue { state: Mutex::new(State { busy: false, waiting: Vec::new() }) }
    }

    /// Runs `item` now if the queue is idle, else queues it.
    pub(super) fn join(&self, item: T) -> Joined<T> {
        let mut state = self.state.lock();
        if state.busy {
            state.waiting.push(item);
            Joined::Waiting(state.waiting.len() - 1)
        } else {
            state.busy = true;
            Joined::Run(item)
        }
    }

    /// True when counts wait.
    pub(super) fn has_waiting(&self) -> bool {
        !self.state.lock().waiting.is_empty()
    }

    /// For the holder of the busy queue, done with its batch: the next one,
    /// oldest first, at most `max` counts, leaving out a count for which
    /// `clashes(batch so far, count)` (it waits for a later batch); `None`
    /// when nothing waits, and the queue is idle again.
    fn next(&self, max: usize, clashes: impl Fn(&[T], &T) -> bool) -> Option<Vec<T>> {
        let mut state = self.state.lock();
        if state.waiting.is_empty() {
            state.busy = false;
            return None;
        }
        let mut batch = Vec::with_capacity(state.waiting.len().min(max));
        let mut left = Vec::new();
        for item in state.waiting.drain(..) {
            if batch.len() < max && !clashes(&batch, &item) {
                batch.push(item);
            } else {
                left.push(item);
            }
        }
        state.waiting = left;
        Some(batch)
    }
}

/// The busy queue's holder, for as long as it runs the batches: held by the
/// work that runs them (moved into its task or thread).
pub(super) struct Holding<O, T> {
    owner: Arc<O>,
    queue: fn(&O) -> &Queue<T>,
    idle: bool,
}

impl<O, T> Holding<O, T> {
    /// Holds `owner`'s queue (reached with `queue`), which answered `Run`.
    pub(super) fn new(owner: Arc<O>, queue: fn(&O) -> &Queue<T>) -> Self {
        Holding { owner, queue, idle: false }
    }

    /// The next batch (see [`Queue::next`]); `None` once the queue is idle.
    pub(super) fn next(&mut self, max: usize, clashes: impl Fn(&[T], &T) -> bool) -> Option<Vec<T>> {
        let next = (self.queue)(&self.owner).next(max, clashes);
        self.idle = next.is_none();
        next
    }
}

impl<O, T> Drop for Holding<O, T> {
    fn drop(&mut self) {
        if self.idle {
            return;
        }
        let abandoned = {
            let mut state = (self.queue)(&self.owner).state.lock();
            state.busy = false;
            std::mem::take(&mut state.waiting)
        };
        drop(abandoned); // outside the lock: their replies close as they go
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &[u32], _: &u32) -> bool {
        false
    }

    #[test]
    fn a_lone_count_runs_at_once_and_later_ones_wait_for_it() {
        let q = Queue::new();
        assert!(matches!(q.join(1), Joined::Run(1)));
        assert!(matches!(q.join(2), Joined::Waiting(0)));
        assert!(matches!(q.join(3), Joined::Waiting(1)));
        assert_eq!(q.next(10, never), Some(vec![2, 3]));
        assert_eq!(q.next(10, never), None, "nothing waits: idle again");
        assert!(matches!(q.join(4), Joined::Run(4)));
    }

    struct Owner {
        queue: Queue<tokio::sync::oneshot::Sender<()>>,
    }

    #[tokio::test]
    async fn a_cancelled_drain_leaves_the_queue_idle_and_its_waiting_counts_answered() {
        let owner = Arc::new(Owner { queue: Queue::new() });
        let (first, _first_answer) = tokio::sync::oneshot::channel();
        let Joined::Run(first) = owner.queue.join(first) else { panic!("an idle queue runs the first count") };
        let holding = Holding::new(owner.clone(), |o: &Owner| &o.queue);
        // The drain's task never finishes its batch: it is aborted.
        let drain = tokio::spawn(async move {
            let _holding = holding;
            let _first = first;
            std::future::pending::<()>().await
        });
        let (waiting, waited) = tokio::sync::oneshot::channel();
        assert!(matches!(owner.queue.join(waiting), Joined::Waiting(0)));
        drain.abort();
        assert!(drain.await.unwrap_err().is_cancelled());
        assert!(waited.await.is_err(), "the waiting count hears at once that nothing will run it");
        let (next, _) = tokio::sync::oneshot::channel();
        assert!(matches!(owner.queue.join(next), Joined::Run(_)), "the queue is idle: the next count runs");
    }

    #[test]
    fn a_holding_that_saw_the_queue_idle_leaves_it_alone() {
        let owner = Arc::new(Owner { queue: Queue::new() });
        let (a, _) = tokio::sync::oneshot::channel();
        assert!(matches!(owner.queue.join(a), Joined::Run(_)));
        let mut holding = Holding::new(owner.clone(), |o: &Owner| &o.queue);
        assert!(holding.next(8, |_, _| false).is_none());
        let (b, _) = tokio::sync::oneshot::channel();
        assert!(matches!(owner.queue.join(b), Joined::Run(_)), "a new holder");
        let (c, mut c_answer) = tokio::sync::oneshot::channel();
        assert!(matches!(owner.queue.join(c), Joined::Waiting(0)));
        drop(holding);
        assert!(
            c_answer.try_recv().is_err_and(|e| e == tokio::sync::oneshot::error::TryRecvError::Empty),
            "still queued"
        );
    }

    #[test]
    fn batches_keep_their_size_and_leave_clashing_counts_for_later() {
        let q = Queue::new();
        assert!(matches!(q.join(0), Joined::Run(0)));
        for i in [1, 2, 1, 3, 4] {
            assert!(matches!(q.join(i), Joined::Waiting(_)));
        }
        let same = |batch: &[u32], i: &u32| batch.contains(i);
        assert_eq!(q.next(3, same), Some(vec![1, 2, 3]));
        assert_eq!(q.next(3, same), Some(vec![1, 4]));
        assert_eq!(q.next(3, same), None);
    }
}
