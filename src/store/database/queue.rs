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
    Waiting(usize),
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
    pub(super) fn next(&self, max: usize, clashes: impl Fn(&[T], &T) -> bool) -> Option<Vec<T>> {
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
