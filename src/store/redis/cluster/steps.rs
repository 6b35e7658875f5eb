//! The steps of cross-slot updates (`txn.rs`: prewrites, commits, settles,
//! rollbacks) that are ready at once go to each node together: one call of
//! the node's script (`NODE` in `scripts.rs`) carries every step bound for
//! that node in one turn of the runtime (`turn.rs`), as `batch.rs` sends
//! one-slot counts. A two-slot count's steps are each one call, so without
//! this every count pays a script call's fixed cost about four times over,
//! on two nodes.
//!
//! In the node's script each step runs exactly as its call of its own would,
//! on its own: one step's miss, refusal or slot never decides another's.
//! Settles go before prewrites in a call, so a prewrite lands after the
//! settles of the same turn (a key that an earlier update of this store left
//! locked is settled before the next update reads it). A settle nobody waits
//! for (a committed update's other slots) is queued before its count is
//! answered, so it rides in the same call as its node's other steps.
//!
//! A node's call that carries no step asking for replicas goes on the
//! cluster connection that sends nothing again by itself (`Link::once`); one
//! that does is followed by `WAIT` and goes on the next of the connections
//! kept for calls that wait (`Link::waiting_once`, built the same way), so a
//! `WAIT` holds up only the calls behind it there. Calls on one connection
//! reach the node in the order they are made; between connections no order
//! holds, and the protocol needs none (`PROTOCOL.md`). That a turn's settles
//! land before a later turn's prewrites is speed only: a prewrite that meets
//! a committed update's lock rolls its try back, and the lock is resolved
//! before the next try.
//!
//! A step answered "not here" is sent again alone by its keys, on the client
//! that follows `MOVED` and `ASK`; so is every step of a call the node
//! refused whole (an answer by which it ran nothing of it, `once.rs`), and
//! every step once a node can't load the script (before Redis 7). Any other
//! failure of the call (a lost connection, a timeout: it may have run) fails
//! every step in it, and none is sent again: each caller takes it as that
//! step's failure, which the protocol already answers (`PROTOCOL.md`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisResult, Value};
use tokio::sync::oneshot;

use super::super::link::Link;
use super::super::script::WAIT_MS;
use super::super::turn::{self, Turn, Waiting};
use super::super::Shared;
use super::node_script::NodeScript;
use super::scripts::{scripts, Call, Kind};
use super::slots::SlotMap;

/// A step's answer, as its call of its own answers: the script's answer and
/// how many replicas acknowledged it (`u64::MAX` when none were asked for).
pub(super) type Answer = RedisResult<(Value, u64)>;

struct Pending {
    call: Call,
    /// Replicas that must acknowledge the step (`WAIT`); 0: none.
    replicas: u32,
    slot: u16,
    /// `None`: nobody waits for the answer (a settle left to run).
    reply: Option<oneshot::Sender<Answer>>,
}

impl Waiting for Pending {
    fn slot(&self) -> u16 {
        self.slot
    }

    fn given_up(&self) -> bool {
        self.reply.as_ref().is_some_and(|r| r.is_closed())
    }
}

impl Pending {
    fn answer(self, answer: Answer) {
        match self.reply {
            Some(reply) => drop(reply.send(answer)),
            None => {
                if let Err(e) = answer {
                    left(&e);
                }
            }
        }
    }
}

/// The steps waiting for the next calls, and how to send them.
pub(in crate::store::redis) struct StepBatcher {
    link: Arc<Link>,
    /// The slots' primaries, as far as known (shared with `batch.rs`).
    slots: Arc<SlotMap>,
    /// The node's script (`NODE`); once a node can't run it, steps alone.
    script: NodeScript,
    waiting: Turn<Pending>,
    /// Steps sent in a node's call with others, those sent again alone
    /// after one, and the node's calls.
    shared: AtomicU64,
    again: AtomicU64,
    calls: AtomicU64,
}

impl std::fmt::Debug for StepBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepBatcher").field("waiting", &self.waiting.len()).finish_non_exhaustive()
    }
}

impl StepBatcher {
    pub(in crate::store::redis) fn new(link: Arc<Link>, slots: Arc<SlotMap>) -> Arc<Self> {
        Arc::new(StepBatcher {
            link,
            slots,
            script: NodeScript::new(scripts().node.clone()),
            waiting: Turn::new(),
            shared: AtomicU64::new(0),
            again: AtomicU64::new(0),
            calls: AtomicU64::new(0),
        })
    }

    /// Steps sent in a node's call with others so far, those sent again
    /// alone after one, and the node's calls.
    #[cfg(test)]
    pub(super) fn counts(&self) -> (u64, u64, u64) {
        let count = |n: &AtomicU64| n.load(Ordering::Relaxed);
        (count(&self.shared), count(&self.again), count(&self.calls))
    }

    /// Sends `call` (a prewrite or a settle) in the next call to its node,
    /// followed by `WAIT replicas` when `replicas` > 0; its answer. A step
    /// whose caller stops waiting before its call is sent is left out.
    pub(super) async fn send(self: &Arc<Self>, call: Call, replicas: u32) -> Answer {
        let (reply, answer) = oneshot::channel();
        self.push(Pending { slot: call.slot(), call, replicas, reply: Some(reply) });
        answer.await.unwrap_or_else(|_| {
            Err(redis::RedisError::from((redis::ErrorKind::Io, "the call carrying this step was dropped")))
        })
    }

    /// Queues `call` (a settle) for the next call to its node, now, with
    /// nobody waiting for it: a failure is left to readers.
    pub(super) fn leave(self: &Arc<Self>, call: Call) {
        self.push(Pending { slot: call.slot(), call, replicas: 0, reply: None });
    }

    fn push(self: &Arc<Self>, pending: Pending) {
        self.waiting.push(pending, || self.clone().flush());
    }

    /// Sends what waits now, in calls per node (`turn.rs`).
    async fn flush(self: Arc<Self>) {
        let mut batch = self.waiting.take();
        // Settles first (a stable sort keeps each kind's order).
        batch.sort_by_key(|p| p.call.kind() != Kind::Settle);
        let Some(conn) = self.link.once().filter(|_| self.script.usable()) else {
            return self.alone(batch).await;
        };
        let nodes = self.slots.now(&conn);
        let calls = turn::calls(batch, nodes.as_deref()).into_iter().map(|batch| self.send_node(conn.clone(), batch));
        turn::all(calls.collect()).await;
    }

    /// One call of the node's script for `batch`, on the primary of its
    /// first step's slot (a lone step too), on `conn`; if a step asks for
    /// replicas, on the next connection kept for calls that wait.
    async fn send_node(&self, conn: ClusterConnection, batch: Vec<Pending>) {
        if batch.len() > 1 {
            self.shared.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        self.calls.fetch_add(1, Ordering::Relaxed);
        let replicas = batch.iter().map(|p| p.replicas).max().unwrap_or(0);
        let mut conn = if replicas == 0 { conn } else { self.link.waiting_once().unwrap_or(conn) };
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.hash()).arg(0);
        for pending in &batch {
            pending.call.push_step(&mut cmd);
        }
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(batch[0].slot, SlotAddr::Master));
        let reply = self.script.call(&mut conn, &cmd, &route, replicas, WAIT_MS).await;
        let again = match reply {
            // Refused whole: nothing of it ran; each step goes by its keys.
            Err(e) if super::once::ran_nothing(&e) => batch,
            Err(e) => {
                for pending in batch {
                    pending.answer(Err(e.clone()));
                }
                return;
            }
            Ok((value, acked)) => answer(batch, value, acked),
        };
        if again.is_empty() {
            return;
        }
        self.again.fetch_add(again.len() as u64, Ordering::Relaxed);
        if let Some(conn) = self.link.cluster() {
            self.slots.ask(&conn);
        }
        self.alone(again).await;
    }

    /// Each step of `batch` in a call of its own, routed by its keys, at once.
    async fn alone(&self, batch: Vec<Pending>) {
        let sent = batch.into_iter().map(|pending| async move {
            let answer = pending.call.send(&mut self.link.conn(), pending.replicas).await;
            pending.answer(answer);
        });
        drop(futures_util::future::join_all(sent).await);
    }
}

/// Sends `call` (a prewrite or a settle) with the other steps ready now
/// for its node, as [`StepBatcher::send`].
pub(super) async fn send(shared: &Shared, call: Call, replicas: u32) -> Answer {
    match &shared.steps {
        Some(steps) => steps.send(call, replicas).await,
        None => call.send(&mut shared.link.conn(), replicas).await,
    }
}

/// Queues `call` (a settle nobody waits for), as [`StepBatcher::leave`].
pub(super) fn leave(shared: &Arc<Shared>, call: Call) {
    match &shared.steps {
        Some(steps) => steps.leave(call),
        None => {
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(e) = call.send(&mut shared.link.conn(), 0).await {
                    left(&e);
                }
            });
        }
    }
}

/// Notes a settle nobody waited for that failed.
fn left(e: &redis::RedisError) {
    tracing::debug!(kind = crate::log::Kind::RedisLocksLeft.as_str(), error = %e, "a committed update's locks are left for readers to settle");
}

/// Answers each step of `batch` from the node's answer `{now, answer...}`;
/// those answered "not here" come back, to be sent alone.
fn answer(batch: Vec<Pending>, value: Value, acked: u64) -> Vec<Pending> {
    let Value::Array(items) = value else {
        let e = super::super::script::unexpected(format!("the node's step script answered {value:?}"));
        for pending in batch {
            pending.answer(Err(e.clone()));
        }
        return Vec::new();
    };
    let mut answers = items.into_iter().skip(1);
    let mut again = Vec::new();
    for pending in batch {
        match answers.next() {
            Some(Value::BulkString(b)) if b.first() == Some(&b'E') => again.push(pending),
            Some(Value::BulkString(b)) => {
                let e = String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned();
                pending.answer(Err(redis::RedisError::from((
                    redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                    "the step failed",
                    e,
                ))));
            }
            Some(value) => {
                let acked = if pending.replicas == 0 { u64::MAX } else { acked };
                pending.answer(Ok((value, acked)));
            }
            None => pending.answer(Err(super::super::script::unexpected("a step without an answer".to_owned()))),
        }
    }
    again
}
