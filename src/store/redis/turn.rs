//! What is ready in one turn of the runtime goes to Redis together, as
//! ioredis writes the commands of one event-loop turn at once: the one-slot
//! compare-and-sets (`batch.rs`) and the steps of cross-slot updates
//! (`cluster/steps.rs`) each wait in a [`Turn`].
//!
//! - **The first of a turn starts the flush.** It spawns a task that runs
//!   after the others ready in the same turn and takes everything that waits
//!   then; a lone item goes alone, a task hop later. Flushes do not wait for
//!   each other: several may be out at once. A capped turn (the integer
//!   counts', `integer/`) has at most two out: Redis runs one while this
//!   process handles the other's answers, and what comes meanwhile waits
//!   for the next, so its calls are fuller. It pays where a call costs more
//!   than the counts in it (the integer script's `TIME`, its call, its
//!   answer); the compare-and-set's cost is mostly per count, and capped it
//!   measured no different (54f7d37).
//! - **Nobody waiting, nothing sent.** An item whose caller stopped waiting
//!   before the flush is left out of it.
//! - **One call per node.** On a cluster the items go in one group per
//!   primary that the slot map (`cluster/slots.rs`) says serves their slots,
//!   and per slot where it knows none; each group in calls of at most
//!   [`MAX_CALL`] items, all sent at once. The map is only a guess: a node
//!   answers an item of a slot it does not serve "not here", nothing of it
//!   written, and its sender sends it again alone by its keys, on the
//!   client's route.
//! - **The first answer first.** On one server, a call's first answer is
//!   handed to its caller, and that caller's task let run, before the
//!   others ([`hand_over`]): its next count goes out while this process
//!   handles the rest of the answers, so Redis runs one call while this
//!   process reads the last. Handed all at once, on one thread, the next
//!   counts all wait for the last answer, and Redis and this process take
//!   turns instead (e45fc6e). The rest go at once, so that counts
//!   ready together still share a call. In a capped turn that count goes
//!   out at once only if a place is free; a flush keeps its own place
//!   until its counts are handed over, so that the next takes them all.
//!   Given back as soon as the answer was read, the place went to the first
//!   count alone, and calls of one or two counts made the integer counts
//!   slower at 8 and 32 callers (d79693d).

use std::future::Future;

use parking_lot::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};

use super::cluster::slots::node;

/// The most items one call carries; more that wait go in several calls.
const MAX_CALL: usize = 64;

/// How many flushes a capped turn has out at once: two, so that Redis runs
/// one while this process handles the other's answers.
const OUT: usize = 2;

/// An item waiting for its turn's call.
pub(super) trait Waiting {
    /// The hash slot of the item's keys (0 on one server).
    fn slot(&self) -> u16;
    /// True once nobody waits for the item's answer.
    fn given_up(&self) -> bool;
}

/// The items waiting for the next flush.
pub(super) struct Turn<T> {
    waiting: Mutex<Vec<T>>,
    /// With a cap, how many flushes may be out at once (see [`Turn::capped`]).
    out: Option<Semaphore>,
}

impl<T: Waiting> Turn<T> {
    /// Flushes go out as soon as their turn ends, as many at once as there are.
    pub(super) fn new() -> Self {
        Turn { waiting: Mutex::new(Vec::new()), out: None }
    }

    /// At most [`OUT`] flushes out at once: a flush waits for one to end
    /// before it takes what waits, and what comes meanwhile goes with it.
    pub(super) fn capped() -> Self {
        Turn { waiting: Mutex::new(Vec::new()), out: Some(Semaphore::new(OUT)) }
    }

    /// [`take`](Self::take), once a flush may go out: the place it holds
    /// until it is dropped (none without a cap).
    pub(super) async fn take_when_free(&self) -> (Option<SemaphorePermit<'_>>, Vec<T>) {
        // The semaphore is never closed.
        let place = match &self.out {
            Some(out) => out.acquire().await.ok(),
            None => None,
        };
        (place, self.take())
    }

    /// How many items wait now.
    pub(super) fn len(&self) -> usize {
        self.waiting.lock().len()
    }

    /// Adds `item` to this turn; the first of a turn spawns `flush`, which
    /// is to [`take`](Self::take) them.
    pub(super) fn push<F>(&self, item: T, flush: impl FnOnce() -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let first = {
            let mut waiting = self.waiting.lock();
            waiting.push(item);
            waiting.len() == 1
        };
        if first {
            tokio::spawn(flush());
        }
    }

    /// Everything that waits now but what nobody waits for; the next push
    /// starts a new turn.
    pub(super) fn take(&self) -> Vec<T> {
        let mut items = std::mem::take(&mut *self.waiting.lock());
        items.retain(|item| !item.given_up());
        items
    }
}

/// `items` in calls: a group per node that `nodes` (the slot map now, if
/// known) names for their slots, a group per slot for the others, and each
/// group in calls of at most [`MAX_CALL`], in the items' order.
pub(super) fn calls<T: Waiting>(items: Vec<T>, nodes: Option<&[u16]>) -> Vec<Vec<T>> {
    let group_of = |item: &T| {
        let slot = item.slot();
        match nodes.and_then(|nodes| node(nodes, slot)) {
            Some(node) => (true, node),
            None => (false, slot),
        }
    };
    // One group that fits one call: the items go as they are.
    if let Some(first) = items.first().filter(|_| items.len() <= MAX_CALL) {
        let group = group_of(first);
        if items[1..].iter().all(|item| group_of(item) == group) {
            return vec![items];
        }
    }
    let mut groups: Vec<((bool, u16), Vec<T>)> = Vec::new();
    for item in items {
        let group = group_of(&item);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, members)) => members.push(item),
            None => groups.push((group, vec![item])),
        }
    }
    let mut calls = Vec::with_capacity(groups.len());
    for (_, mut group) in groups {
        while group.len() > MAX_CALL {
            let rest = group.split_off(MAX_CALL);
            calls.push(std::mem::replace(&mut group, rest));
        }
        calls.push(group);
    }
    calls
}

/// Hands each caller its answer: the first alone, then, once its caller's
/// task has run (and sent its next count), the rest at once.
pub(super) async fn hand_over<T>(answers: Vec<(tokio::sync::oneshot::Sender<T>, T)>) {
    let mut answers = answers.into_iter();
    // Nobody waits for an answer whose caller gave up.
    if let Some((reply, answer)) = answers.next() {
        let _ = reply.send(answer);
        if answers.len() > 0 {
            tokio::task::yield_now().await;
        }
    }
    for (reply, answer) in answers {
        let _ = reply.send(answer);
    }
}

/// Runs `calls` at once, until the last is answered.
pub(super) async fn all<F: Future<Output = ()>>(mut calls: Vec<F>) {
    match calls.len() {
        0 => {}
        1 => calls.pop().expect("one call").await,
        _ => drop(futures_util::future::join_all(calls).await),
    }
}

#[cfg(test)]
mod tests {
    use super::{calls, Turn, Waiting, MAX_CALL};

    struct Item(u16, bool);

    impl Waiting for Item {
        fn slot(&self) -> u16 {
            self.0
        }
        fn given_up(&self) -> bool {
            self.1
        }
    }

    fn slots(calls: &[Vec<Item>]) -> Vec<Vec<u16>> {
        calls.iter().map(|call| call.iter().map(|item| item.0).collect()).collect()
    }

    #[test]
    fn groups_by_node_then_by_slot_in_calls_of_at_most_the_most() {
        // Slots 0 and 1 on node 0, slot 2 on node 1, slot 3 unknown.
        let nodes = [0, 0, 1, u16::MAX];
        let items = [3, 0, 2, 1, 3, 0].map(|slot| Item(slot, false)).into_iter().collect();
        assert_eq!(slots(&calls(items, Some(&nodes))), [vec![3, 3], vec![0, 1, 0], vec![2]]);
        let items = [1, 0, 1].map(|slot| Item(slot, false)).into_iter().collect();
        assert_eq!(slots(&calls(items, None)), [vec![1, 1], vec![0]], "no map: per slot");
        let many = (0..2 * MAX_CALL + 1).map(|_| Item(0, false)).collect();
        let lens: Vec<usize> = calls(many, None).iter().map(Vec::len).collect();
        assert_eq!(lens, [MAX_CALL, MAX_CALL, 1]);
    }

    /// On one thread, the first answered caller runs before the others are
    /// handed their answers.
    #[tokio::test(flavor = "current_thread")]
    async fn the_first_caller_runs_before_the_others_are_answered() {
        let ran = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut answers = Vec::new();
        for i in 0..3 {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let ran = ran.clone();
            tokio::spawn(async move {
                let answer = rx.await.unwrap();
                ran.lock().push(answer);
            });
            answers.push((tx, i));
        }
        tokio::task::yield_now().await;
        super::hand_over(answers).await;
        assert_eq!(*ran.lock(), [0], "the first ran before the others were handed theirs");
        tokio::task::yield_now().await;
        assert_eq!(*ran.lock(), [0, 1, 2]);
    }

    /// A capped turn has two flushes out at most: the third waits for one
    /// to end, and takes what was pushed meanwhile, together.
    #[tokio::test(flavor = "current_thread")]
    async fn a_capped_turn_has_two_flushes_out_and_the_next_takes_what_came_meanwhile() {
        let turn = std::sync::Arc::new(Turn::capped());
        let taken = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let ends = std::sync::Arc::new(tokio::sync::Semaphore::new(0));
        let flush = || {
            let (turn, taken, ends) = (turn.clone(), taken.clone(), ends.clone());
            move || async move {
                let (_out, items) = turn.take_when_free().await;
                taken.lock().push(items.len());
                ends.acquire().await.unwrap().forget();
            }
        };
        for pushes in [1, 1, 3] {
            for _ in 0..pushes {
                turn.push(Item(0, false), flush());
            }
            for _ in 0..3 {
                tokio::task::yield_now().await;
            }
        }
        assert_eq!(*taken.lock(), [1, 1], "two out; the third waits");
        assert_eq!(turn.len(), 3, "what came meanwhile waits for it");
        ends.add_permits(1);
        for _ in 0..3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(*taken.lock(), [1, 1, 3]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_first_of_a_turn_flushes_and_leaves_out_who_gave_up() {
        let turn = std::sync::Arc::new(Turn::new());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let flush = {
            let turn = turn.clone();
            move || async move { drop(tx.send(turn.take())) }
        };
        turn.push(Item(1, false), flush);
        turn.push(Item(2, true), || async { unreachable!("only the first of a turn flushes") });
        turn.push(Item(3, false), || async { unreachable!("only the first of a turn flushes") });
        assert_eq!(turn.len(), 3);
        let taken: Vec<u16> = rx.await.unwrap().iter().map(|item| item.0).collect();
        assert_eq!(taken, [1, 3]);
        assert_eq!(turn.len(), 0);
    }
}
