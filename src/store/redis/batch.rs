//! The compare-and-sets of counts that are ready at once go to Redis together,
//! in one call of the write script (see `script.rs`), as ioredis writes all
//! the commands of one event-loop turn at once: one command, one script call
//! and one answer serve them all, which spares Redis and this process the
//! per-command work that two shared cores otherwise spend on each count.
//!
//! A count hands its compare-and-set to the [`Batcher`] and waits for its
//! answer. The first of a turn spawns a task that runs after the counts ready
//! in the same turn of the runtime, and sends everything that waits then as
//! one batch; a lone count goes alone, a task hop later. Batches do not wait
//! for each other: several may be out at once on the one connection.
//!
//! In the script each update is checked and written on its own, exactly as
//! if it were sent alone: its keys, its clock bounds, its claims; one update's
//! miss or refusal changes nothing for another, and each count retries on its
//! own. Only a failure of the whole call (the connection, a timeout) fails
//! every count in it, as it fails every command in flight on the connection.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use redis::{Script, Value};
use tokio::sync::oneshot;

use super::entry::Raw;
use super::family::{push_tag, Tag};
use super::link::Link;
use super::script::{millis, raw, unexpected, WRITE};
use super::{failed, refused};
use crate::seen::KeyHash;
use crate::{Millis, StoreError};

/// The most updates one script call carries; more that wait go in several
/// calls, sent at once.
const MAX_BATCH: usize = 64;

/// What one key should become.
#[derive(Debug)]
pub(super) enum Op {
    Keep,
    Delete,
    /// Put `raw`; Redis drops it at `pxat` (its expiry plus the grace).
    Put {
        raw: Raw,
        pxat: Millis,
    },
}

/// One update's compare-and-set: write `ops` if the keys of `hashes` still
/// hold `expected` and the server's clock is within `lead`/`lag` of `at`.
/// Owned, since a batch is sent from a task of its own; it comes back with
/// the answer.
#[derive(Debug)]
pub(super) struct WriteCall {
    pub(super) hashes: Vec<KeyHash>,
    /// The family tag of each key (see `family.rs`).
    pub(super) tags: Vec<Tag>,
    pub(super) expected: Vec<Raw>,
    pub(super) ops: Vec<Op>,
    pub(super) at: Millis,
    pub(super) lead: i64,
    /// `None`: any.
    pub(super) lag: Option<i64>,
    pub(super) token: u64,
    /// Claim the keys for the next try if this one misses.
    pub(super) claim: bool,
}

/// How one compare-and-set went.
#[derive(Debug)]
pub(super) enum Written {
    /// Written, at the server's clock.
    Done { now: Millis },
    /// Nothing written: what the keys hold now, and the server's clock.
    Changed { now: Millis, held: Vec<Raw> },
    /// Not tried: another update has claimed a key for its next try.
    Claimed { now: Millis, held: Vec<Raw> },
}

/// A compare-and-set back from its batch, with its answer.
pub(super) type Sent = (WriteCall, Result<Written, StoreError>);

struct Pending {
    call: WriteCall,
    reply: oneshot::Sender<Sent>,
}

/// The compare-and-sets waiting for the next batch, and how to send one.
pub(super) struct Batcher {
    link: Arc<Link>,
    script: Script,
    /// Replicas that must acknowledge a batch before its counts are
    /// answered (`WAIT`); 0: none.
    min_acked: u32,
    /// What entries' keys start with, and claims' keys.
    names: String,
    claims: String,
    /// On a cluster: a call carries only updates of one slot.
    cluster: bool,
    waiting: Mutex<Vec<Pending>>,
    /// Updates sent in a call with others so far.
    batched: AtomicU64,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("waiting", &self.waiting.lock().len()).finish_non_exhaustive()
    }
}

impl Batcher {
    pub(super) fn new(link: Arc<Link>, names: String, claims: String, min_acked: u32) -> Arc<Self> {
        Arc::new(Batcher {
            cluster: link.cluster().is_some(),
            link,
            min_acked,
            script: Script::new(WRITE),
            names,
            claims,
            waiting: Mutex::new(Vec::new()),
            batched: AtomicU64::new(0),
        })
    }

    /// Updates sent in a call with others so far.
    #[cfg(test)]
    pub(super) fn batched(&self) -> u64 {
        self.batched.load(Ordering::Relaxed)
    }

    /// Sends `call` in the next batch and answers how it went. A count that
    /// stops waiting before its batch is sent is left out of it.
    pub(super) async fn write(self: &Arc<Self>, call: WriteCall) -> Result<Sent, StoreError> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut waiting = self.waiting.lock();
            waiting.push(Pending { call, reply });
            waiting.len() == 1
        };
        if first {
            tokio::spawn(self.clone().flush());
        }
        answer.await.map_err(|_| {
            StoreError::unavailable(
                crate::error::Unavailable::StoreFailed,
                "the call to Redis carrying this update was dropped; it may have been written",
            )
        })
    }

    /// Sends what waits now, in calls of at most [`MAX_BATCH`] updates.
    async fn flush(self: Arc<Self>) {
        let mut batch: Vec<Pending> = std::mem::take(&mut *self.waiting.lock());
        batch.retain(|p| !p.reply.is_closed());
        let mut calls = Vec::with_capacity(batch.len().div_ceil(MAX_BATCH));
        for mut batch in self.by_slot(batch) {
            while batch.len() > MAX_BATCH {
                let rest = batch.split_off(MAX_BATCH);
                calls.push(self.send(std::mem::replace(&mut batch, rest)));
            }
            if !batch.is_empty() {
                calls.push(self.send(batch));
            }
        }
        match calls.len() {
            0 => {}
            1 => calls.pop().expect("one call").await,
            _ => drop(futures_util::future::join_all(calls).await),
        }
    }

    /// `batch` as one group, or on a cluster one group per slot (an update
    /// sent here has every key in one slot).
    fn by_slot(&self, batch: Vec<Pending>) -> Vec<Vec<Pending>> {
        if !self.cluster {
            return vec![batch];
        }
        let mut groups: Vec<(u16, Vec<Pending>)> = Vec::new();
        for pending in batch {
            let slot = pending.call.hashes.first().map_or(0, super::cluster::slot);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(pending),
                None => groups.push((slot, vec![pending])),
            }
        }
        groups.into_iter().map(|(_, group)| group).collect()
    }

    /// One script call for `batch`, and each of its updates answered.
    async fn send(&self, batch: Vec<Pending>) {
        if batch.len() > 1 {
            self.batched.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        let cmd = self.command(&batch);
        let mut conn = self.link.conn();
        let mut reply = self.call(&mut conn, &cmd).await;
        if matches!(&reply, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)) {
            reply = match self.script.load_async(&mut conn).await {
                Ok(_) => self.call(&mut conn, &cmd).await,
                Err(e) => Err(e),
            };
        }
        let (mut answers, acked) = match reply {
            Ok((Value::Array(items), acked)) => (items.into_iter(), acked),
            Ok((other, _)) => {
                let e = unexpected(format!("the write script answered {other:?}"));
                return answer_all(batch, &e);
            }
            Err(e) => {
                self.link.trouble(false, Some(&e));
                return answer_all(batch, &e);
            }
        };
        let now = match millis(answers.next()) {
            Ok(now) => now,
            Err(e) => return answer_all(batch, &e),
        };
        let mut readonly = false;
        for Pending { call, reply } in batch {
            let answer = match answer(&mut answers, now, call.hashes.len(), &mut readonly) {
                Ok(Written::Done { .. }) if acked < u64::from(self.min_acked) => Err(unacked(acked, self.min_acked)),
                answer => answer,
            };
            let _ = reply.send((call, answer));
        }
        if readonly {
            self.link.trouble(true, None);
        }
    }

    /// Sends `cmd`, followed by `WAIT` for the replicas when the store asks
    /// for them; the script's answer, and how many replicas acknowledged
    /// (`u64::MAX` when none were asked for).
    async fn call(&self, conn: &mut super::link::Conn, cmd: &redis::Cmd) -> redis::RedisResult<(Value, u64)> {
        if self.min_acked == 0 {
            return Ok((cmd.query_async::<Value>(conn).await?, u64::MAX));
        }
        let mut pipe = redis::pipe();
        pipe.add_command(cmd.clone()).cmd("WAIT").arg(self.min_acked).arg(WAIT_MS);
        let (value, acked): (Value, u64) = pipe.query_async(conn).await?;
        Ok((value, acked))
    }

    /// `EVALSHA` of the write script with every update of `batch`.
    fn command(&self, batch: &[Pending]) -> redis::Cmd {
        let keys: usize = batch.iter().map(|p| 2 * p.call.hashes.len()).sum();
        let mut cmd =
            redis::Cmd::with_capacity(3 + keys + batch.iter().map(|p| 6 + 3 * p.call.hashes.len()).sum::<usize>(), 0);
        cmd.arg("EVALSHA").arg(self.script.get_hash()).arg(keys);
        let mut name = String::with_capacity(self.claims.len().max(self.names.len()) + 69);
        for Pending { call, .. } in batch {
            for (hash, &tag) in call.hashes.iter().zip(&call.tags) {
                name.clear();
                name.push_str(&self.names);
                push_tag(&mut name, tag);
                super::cluster::push_hash(&mut name, hash, self.cluster);
                cmd.arg(name.as_str());
            }
            for hash in &call.hashes {
                name.clear();
                name.push_str(&self.claims);
                super::cluster::push_hash(&mut name, hash, self.cluster);
                cmd.arg(name.as_str());
            }
        }
        for Pending { call, .. } in batch {
            cmd.arg(call.hashes.len()).arg(call.at).arg(call.lead).arg(call.lag.unwrap_or(-1)).arg(call.token).arg(
                match (call.claim, self.cluster) {
                    (false, false) => "0",
                    (true, false) => "1",
                    // On a cluster, mark the written update (see `script.rs`).
                    (false, true) => "2",
                    (true, true) => "3",
                },
            );
            for raw in &call.expected {
                cmd.arg(raw.as_bytes());
            }
            for op in &call.ops {
                match op {
                    Op::Keep => cmd.arg("K"),
                    Op::Delete => cmd.arg("D"),
                    Op::Put { raw, .. } => cmd.arg(raw.as_bytes()),
                };
            }
            for op in &call.ops {
                match op {
                    Op::Put { pxat, .. } => cmd.arg(*pxat),
                    Op::Keep | Op::Delete => cmd.arg(0),
                };
            }
        }
        cmd
    }
}

/// How long a count waits for its replicas (`WAIT`), under the client's
/// bound on a call.
const WAIT_MS: u64 = 1_000;

/// The answer of a count written on the primary that too few replicas
/// acknowledged in time.
fn unacked(acked: u64, wanted: u32) -> StoreError {
    StoreError::unavailable(
        crate::error::Unavailable::StoreFailed,
        format!(
            "the count was written on the Redis primary but only {acked} of the {wanted} replicas that              min_replicas_acked asks for acknowledged it in time: a failover now could lose it, so it is not              acknowledged (check the replicas, or lower min_replicas_acked)"
        ),
    )
}

/// Every update of `batch` answered with the failure of their call.
fn answer_all(batch: Vec<Pending>, e: &redis::RedisError) {
    for Pending { call, reply } in batch {
        let _ = reply.send((call, Err(failed(e.clone()))));
    }
}

/// The next update's answer in the script's answer, for an update of `n` keys.
fn answer(
    answers: &mut impl Iterator<Item = Value>,
    now: Millis,
    n: usize,
    readonly: &mut bool,
) -> Result<Written, StoreError> {
    let status = answers.next();
    let held = |answers: &mut dyn Iterator<Item = Value>| {
        (0..n).map(|_| raw(answers.next().unwrap_or(Value::Nil))).collect::<redis::RedisResult<_>>().map_err(failed)
    };
    match status {
        Some(Value::Int(1)) => Ok(Written::Done { now }),
        Some(Value::Int(0)) => Ok(Written::Changed { now, held: held(answers)? }),
        Some(Value::Int(2)) => Ok(Written::Claimed { now, held: held(answers)? }),
        Some(Value::Int(3)) => {
            let error = match answers.next() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
                Some(Value::SimpleString(s)) => s,
                other => format!("{other:?}"),
            };
            *readonly |= error.starts_with("READONLY");
            Err(refused(error))
        }
        other => Err(failed(unexpected(format!("the write script answered {other:?} for an update")))),
    }
}
