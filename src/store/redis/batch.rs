//! The compare-and-sets of counts that are ready at once go to Redis together,
//! in one call of the write script (see `script.rs`), as ioredis writes all
//! the commands of one event-loop turn at once: one command, one script call
//! and one answer serve them all, which spares Redis and this process the
//! per-command work that two shared cores otherwise spend on each count.
//!
//! A count hands its compare-and-set to the [`Batcher`] and waits for its
//! answer; the calls of a turn are made as `turn.rs` says, and several may
//! be out at once on one connection. With `min_replicas_acked` each call is
//! followed by `WAIT` on its connection, and goes on the next of the
//! connections kept for the writes that wait (`link.rs`): a `WAIT` holds up
//! only the calls behind it there.
//!
//! In the script each update is checked and written on its own, exactly as
//! if it were sent alone: its keys, its clock bounds, its claims; one update's
//! miss or refusal changes nothing for another, and each count retries on its
//! own. Only a failure of the whole call (the connection, a timeout) fails
//! every count in it, as it fails every command in flight on the connection.
//!
//! On a cluster a script's declared keys share a slot, so a call of one
//! slot is one call as on one server, routed by its keys; a call of several
//! slots of one node (`turn.rs` groups them) is one call of the node's
//! script (`WRITE_NODE`), which declares no key and touches the keys of
//! every slot the node serves. There a count whose slot the node does not
//! serve is answered "not here" and sent again in a call of its own slot,
//! which the cluster client routes and redirects; so is every count of a
//! node call the node refuses whole (a replica now, no such script flag
//! before Redis 7). On a cluster the write script is sent again only after
//! an answer that says the node ran nothing of it (`cluster/once.rs`).
//!
//! An update whose keys lie in several slots of one node (as the map has
//! it: [`Batcher::one_node`]) goes in that node's call too, checked and
//! written whole in one step as a one-slot update is (see
//! `cluster/PROTOCOL.md`). It has no call of its own slot to fall back to:
//! where the node does not serve all its slots now, or refuses the call
//! whole, it is answered [`Written::SlotsApart`], nothing of it written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{Script, Value};
use tokio::sync::oneshot;

use super::cluster::call_node;
use super::cluster::node_script::NodeScript;
use super::cluster::slots::{node, SlotMap};
use super::link::{Conn, Link};
use super::script::{call, loaded, millis, unexpected, WAIT_MS, WRITE, WRITE_NODE};
use super::turn::{self, Turn, Waiting};
use super::write::{answer, command, Elsewhere, Keys, Names};
pub(super) use super::write::{Op, WriteCall, Written};
use super::{failed, refused};
use crate::StoreError;

/// A compare-and-set back from its batch, with its answer.
pub(super) type Sent = (WriteCall, Result<Written, StoreError>);

/// An update's answer, ready to hand over.
type Answered = (oneshot::Sender<Sent>, Sent);

struct Pending {
    call: WriteCall,
    reply: oneshot::Sender<Sent>,
    /// On a cluster, the slot of the update's first key (of every key but
    /// when `apart`); 0 on one server.
    slot: u16,
    /// The update's keys lie in several slots (of one node, as the map had it).
    apart: bool,
}

impl Waiting for Pending {
    fn slot(&self) -> u16 {
        self.slot
    }

    fn given_up(&self) -> bool {
        self.reply.is_closed()
    }
}

/// The compare-and-sets waiting for the next batch, and how to send one.
pub(super) struct Batcher {
    link: Arc<Link>,
    script: Script,
    /// The script of one cluster node's several slots; once a node can't
    /// run it, calls per slot.
    node_script: NodeScript,
    /// On a cluster: the slots' primaries, as far as known.
    slots: Option<Arc<SlotMap>>,
    /// Replicas that must acknowledge a batch before its counts are
    /// answered (`WAIT`); 0: none.
    pub(super) min_acked: u32,
    /// What entries' keys start with, and claims' keys.
    names: String,
    claims: String,
    /// On a cluster: a call carries only updates of one slot, or of one node.
    cluster: bool,
    waiting: Turn<Pending>,
    /// Updates sent in a call with others so far.
    batched: AtomicU64,
    /// Updates sent in a node's call so far, and those sent again after it.
    across: AtomicU64,
    again: AtomicU64,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("waiting", &self.waiting.len()).finish_non_exhaustive()
    }
}

impl Batcher {
    pub(super) fn new(link: Arc<Link>, names: String, claims: String, min_acked: u32) -> Arc<Self> {
        Arc::new(Batcher {
            cluster: link.cluster().is_some(),
            slots: link.cluster().map(|_| SlotMap::new()),
            link,
            min_acked,
            script: Script::new(WRITE),
            node_script: NodeScript::new(Script::new(WRITE_NODE)),
            names,
            claims,
            waiting: Turn::new(),
            batched: AtomicU64::new(0),
            across: AtomicU64::new(0),
            again: AtomicU64::new(0),
        })
    }

    /// Updates sent in a call with others so far.
    #[cfg(test)]
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Updates sent in a node's call so far, and those sent again after it.
    #[cfg(test)]
    pub(super) fn across(&self) -> (u64, u64) {
        (self.across.load(Ordering::Relaxed), self.again.load(Ordering::Relaxed))
    }

    /// The map of the slots' primaries, on a cluster.
    pub(super) fn slot_map(&self) -> Option<&Arc<SlotMap>> {
        self.slots.as_ref()
    }

    /// Sends `call` in the next batch and answers how it went. A count that
    /// stops waiting before its batch is sent is left out of it.
    pub(super) async fn write(self: &Arc<Self>, call: WriteCall) -> Result<Sent, StoreError> {
        let (reply, answer) = oneshot::channel();
        let slot = if self.cluster { call.hashes.first().map_or(0, super::cluster::slot) } else { 0 };
        let apart = self.cluster && call.hashes.iter().skip(1).any(|h| super::cluster::slot(h) != slot);
        self.waiting.push(Pending { call, reply, slot, apart }, || self.clone().flush());
        answer.await.map_err(|_| {
            StoreError::unavailable(
                crate::error::Unavailable::StoreFailed,
                "the call to Redis carrying this update was dropped; it may have been written",
            )
        })
    }

    /// True when a write on the keys of `hashes`, which lie in several
    /// slots, can go in one node's call: the nodes run its script, and the
    /// map says one primary serves every slot of them.
    pub(super) fn one_node(&self, hashes: &[crate::key_hash::KeyHash]) -> bool {
        let (Some(map), Some(conn)) = (&self.slots, self.link.cluster()) else { return false };
        let Some(nodes) = map.now(&conn).filter(|_| self.node_script.usable()) else { return false };
        let mut primaries = hashes.iter().map(|h| node(&nodes, super::cluster::slot(h)));
        let first = primaries.next().flatten();
        first.is_some() && primaries.all(|n| n == first)
    }

    /// Sends what waits now: on a cluster a call per node whose slots the
    /// map knows, and per slot for the others (an update sent here has every
    /// key in one slot, or in slots of one node: below).
    async fn flush(self: Arc<Self>) {
        let batch = self.waiting.take();
        let nodes = match (&self.slots, self.link.cluster()) {
            (Some(map), Some(conn)) if self.node_script.usable() => map.now(&conn),
            _ => None,
        };
        turn::all(turn::calls(batch, nodes.as_deref()).into_iter().map(|batch| self.send(batch)).collect()).await;
    }

    /// One script call for `batch` (of one slot, or one server: the keys'
    /// script; of several slots of a node: the node's), and each of its
    /// updates answered.
    async fn send(&self, batch: Vec<Pending>) {
        if batch.len() > 1 {
            self.batched.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        let slot = batch[0].slot;
        if self.cluster && batch.iter().any(|p| p.slot != slot || p.apart) {
            self.send_node(slot, batch).await;
        } else {
            self.send_keys(batch).await;
        }
    }

    /// One call of the node script for `batch`, on the primary of `slot`;
    /// what the node does not serve, or refuses, is sent again per slot.
    async fn send_node(&self, slot: u16, batch: Vec<Pending>) {
        self.across.fetch_add(batch.len() as u64, Ordering::Relaxed);
        let cmd = self.command(&batch, Keys::InArgs);
        let Some(mut conn) = self.once() else { return answer_all(batch, &not_cluster()) };
        let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
        let reply = self.node_script.call(&mut conn, &cmd, &route, self.min_acked, WAIT_MS).await;
        let (mut answered, again) = match reply {
            // The node refused the call whole (a replica now, a cluster
            // down): nothing of it ran; each slot's call is routed anew.
            Err(e) if !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped()) => (Vec::new(), batch),
            reply => self.answer(batch, reply, true),
        };
        let (apart, again): (Vec<_>, Vec<_>) = again.into_iter().partition(|p| p.apart);
        answered.extend(apart.into_iter().map(|p| (p.reply, (p.call, Ok(Written::SlotsApart)))));
        answer_now(answered);
        if again.is_empty() {
            return;
        }
        self.again.fetch_add(again.len() as u64, Ordering::Relaxed);
        if let (Some(map), Some(conn)) = (&self.slots, self.link.cluster()) {
            map.ask(&conn);
        }
        let calls = turn::calls(again, None).into_iter().map(|group| self.send_keys(group));
        turn::all(calls.collect()).await;
    }

    /// One call of the keys' script for `batch`.
    async fn send_keys(&self, batch: Vec<Pending>) {
        let reply = loaded(&self.script, self.link.conn(), || self.call_keys(&batch)).await;
        let (answered, again) = self.answer(batch, reply, false);
        debug_assert!(again.is_empty(), "a call by keys answers every update");
        if self.cluster {
            // At once: a cluster's counts already overlap across its nodes'
            // calls, and answers handed over one by one lowered its rates.
            answer_now(answered);
        } else {
            turn::hand_over(answered).await;
        }
    }

    /// The answer of each update of `batch` from `reply`, to hand over;
    /// those a node script answered "not here" (`node`) come back, to be
    /// sent again. A call that failed whole is answered here.
    fn answer(
        &self,
        batch: Vec<Pending>,
        reply: redis::RedisResult<(Value, u64)>,
        node: bool,
    ) -> (Vec<Answered>, Vec<Pending>) {
        let (mut answers, acked) = match reply {
            Ok((Value::Array(items), acked)) => (items.into_iter(), acked),
            Ok((other, _)) => {
                let e = unexpected(format!("the write script answered {other:?}"));
                answer_all(batch, &e);
                return (Vec::new(), Vec::new());
            }
            Err(e) => {
                self.link.trouble(false, Some(&e));
                answer_all(batch, &e);
                return (Vec::new(), Vec::new());
            }
        };
        let now = match millis(answers.next()) {
            Ok(now) => now,
            Err(e) => {
                answer_all(batch, &e);
                return (Vec::new(), Vec::new());
            }
        };
        let (mut readonly, mut answered, mut again) = (false, Vec::with_capacity(batch.len()), Vec::new());
        for Pending { call, reply, slot, apart } in batch {
            let answer = match answer(&mut answers, now, call.hashes.len(), &mut readonly) {
                Err(Elsewhere(_)) if node => {
                    again.push(Pending { call, reply, slot, apart });
                    continue;
                }
                Err(Elsewhere(error)) => Err(refused(error)),
                Ok(Ok(Written::Done { .. })) if acked < u64::from(self.min_acked) => {
                    Err(unacked(acked, self.min_acked))
                }
                Ok(answer) => answer,
            };
            answered.push((reply, (call, answer)));
        }
        if readonly {
            self.link.trouble(true, None);
        }
        (answered, again)
    }

    /// Sends the keys' script call of `batch`, routed by its keys, as
    /// [`call`](Self::call); on a cluster on a connection of writes, sent
    /// again only while a node answers that it ran nothing of it
    /// (`cluster/once.rs`). Each send builds the call anew: the cluster
    /// client takes it whole, and a send again is rare.
    async fn call_keys(&self, batch: &[Pending]) -> redis::RedisResult<(Value, u64)> {
        let Some(once) = self.once() else {
            let mut conn = if self.min_acked == 0 { self.link.conn() } else { self.link.waiting_conn() };
            return self.call(&mut conn, &self.command(batch, Keys::Declared)).await;
        };
        super::cluster::once::send(|to| {
            let (mut conn, cmd) = (once.clone(), self.command(batch, Keys::Declared));
            async move {
                match to {
                    Some(node) => call_node(&mut conn, &cmd, &node, self.min_acked, WAIT_MS).await,
                    None if self.min_acked == 0 => {
                        let again = || self.command(batch, Keys::Declared);
                        let answer = super::cluster::ask::command_to_slot(&mut conn, cmd, batch[0].slot, again).await;
                        answer.map(|value| (value, u64::MAX))
                    }
                    None => self.call(&mut Conn::Cluster(conn), &cmd).await,
                }
            }
        })
        .await
    }

    /// On a cluster, a connection of writes, which sends nothing again by
    /// itself: when writes wait for replicas, the next of those kept for
    /// them.
    fn once(&self) -> Option<ClusterConnection> {
        if self.min_acked == 0 {
            self.link.once()
        } else {
            self.link.waiting_once()
        }
    }

    /// The script call of `batch`, its keys placed as `keys` says.
    fn command(&self, batch: &[Pending], keys: Keys) -> redis::Cmd {
        let names = Names { entries: &self.names, claims: &self.claims, cluster: self.cluster };
        let hash = if keys == Keys::InArgs { self.node_script.hash() } else { self.script.get_hash() };
        command(hash, batch.iter().map(|p| &p.call), &names, keys)
    }

    /// [`call`] with this store's replicas to wait for.
    async fn call(&self, conn: &mut Conn, cmd: &redis::Cmd) -> redis::RedisResult<(Value, u64)> {
        call(conn, cmd, self.min_acked).await
    }
}

/// The answer of a count written on the primary that too few replicas
/// acknowledged in time.
pub(super) fn unacked(acked: u64, wanted: u32) -> StoreError {
    StoreError::unavailable(
        crate::error::Unavailable::StoreFailed,
        format!(
            "the count was written on the Redis primary but only {acked} of the {wanted} replicas that \
             min_replicas_acked asks for acknowledged it in time: a failover now could lose it, so it is not \
             acknowledged (check the replicas, or lower min_replicas_acked)"
        ),
    )
}

/// Hands every caller its answer at once.
fn answer_now(answered: Vec<Answered>) {
    for (reply, sent) in answered {
        let _ = reply.send(sent);
    }
}

/// Every update of `batch` answered with the failure of their call.
fn answer_all(batch: Vec<Pending>, e: &redis::RedisError) {
    for Pending { call, reply, .. } in batch {
        let _ = reply.send((call, Err(failed(e.clone()))));
    }
}

/// The answer of a node call on a connection that is no longer a cluster's.
fn not_cluster() -> redis::RedisError {
    unexpected("the store's connection is not a cluster's".to_owned())
}
