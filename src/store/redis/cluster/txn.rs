//! An update over keys in several hash slots, in the steps `PROTOCOL.md`
//! argues for: read every key (a script per slot), run `apply`, prewrite a
//! lock with the new entry on every key (every slot at once), commit at the
//! primary key, then settle the other slots' locks to their new entries in
//! the background: the count is answered at the commit.

use std::sync::Arc;
use std::time::Instant;

use super::super::batch::unacked;
use super::super::entry::decode;
use super::super::entry::Raw;
use super::super::family::{FamilyAdmission, Tag};
use super::super::write::ops;
use super::super::CALL_LIMIT;
use super::super::{failed, Op, RedisStore, Shared, MAX_TRIES};
use super::lock::{body, expires_at};
use super::read::{basis, by_slot};
use super::resolve::{record, resolve, settle, settle_acked, settle_call};
use super::scripts::{Call, Kind};
use crate::bound::FamilyId;
use crate::error::Unavailable;
use crate::key_hash::KeyHash;
use crate::rules::run_apply;
use crate::server_clock::{MAX_LAG_MS, MAX_LEAD_MS};
use crate::{Apply, Millis, StoreError};

/// How long a prewritten update holds its primary key before a reader may
/// roll it back (ms, on the primary's clock).
pub(super) const LEASE_MS: u64 = 1_000;
/// The least a lock key lives (ms): it outlives the update's steps even when
/// both its entries have expired.
const LOCK_LIFE_MS: Millis = 60_000;
/// How much longer than every lock of an update its commit record lives
/// (ms): the nodes' clocks may differ by less than this.
const RECORD_MARGIN_MS: Millis = 60_000;

/// True when the keys of `hashes` lie in more than one slot.
pub(in crate::store::redis) fn spans_slots(hashes: &[KeyHash]) -> bool {
    let mut slots = hashes.iter().map(super::slot);
    let first = slots.next();
    slots.any(|s| Some(s) != first)
}

/// How one try of the protocol ended.
enum Tried {
    /// Applied; `acked` replicas of the primary's slot acknowledged the
    /// commit (`u64::MAX` when none were asked for).
    Committed { acked: u64 },
    /// Nothing of it stays: try again on what the keys hold now.
    Again,
}

/// Counts an update whose keys lie in several slots.
pub(in crate::store::redis) async fn count(
    store: &RedisStore,
    hashes: &[KeyHash],
    tags: &[Tag],
    families: &[FamilyId],
    apply: &mut Apply<'_>,
) -> Result<(), StoreError> {
    let shared = &*store.shared;
    let names: Vec<String> = tags.iter().zip(hashes).map(|(&tag, h)| store.name(tag, h)).collect();
    let groups = by_slot(hashes.iter().map(super::slot));
    let mut admission = FamilyAdmission::new(shared.bound.counts(), &shared.families);
    let started = Instant::now();
    let mut trips = 0;
    // A basis read again that differed from the one `apply` saw: `apply`
    // runs on it next, and it is checked in its turn.
    let mut next = None;
    // Tries that prewrote and missed; a basis read again is bounded by the
    // call's time alone, as a read is (`read.rs`).
    let mut missed = 0;
    // The first try runs on the store's guess when it can guess (the entries
    // it last saw, the estimated clock), as a one-slot count does: the
    // prewrites check it, clock and all. A wrong guess costs the read.
    let mut guess = shared.clock.estimate().filter(|_| shared.guess_from_last_seen).map(|now| {
        let held: Vec<Raw> = hashes.iter().map(|h| shared.last_seen.get(h).unwrap_or_default()).collect();
        (now, held)
    });
    while missed < MAX_TRIES {
        let guessed = guess.is_some();
        let (now, held) = match (guess.take(), next.take()) {
            (Some(guess), _) => guess,
            (None, Some(read)) => read,
            (None, None) => basis(shared, &names).await?,
        };
        trips += u64::from(!guessed);
        let entries = match decode(&held, hashes, now) {
            Ok(entries) => entries,
            Err(_) if guessed => continue,
            Err(e) => return Err(e),
        };
        let writes = run_apply(apply, &entries, now)?;
        let (ops, added, removed) = ops(writes, &held, families, shared.grace);
        if guessed && ops.iter().all(|op| matches!(op, Op::Keep)) {
            // A guess is no snapshot: read.
            continue;
        }
        if ops.iter().all(|op| matches!(op, Op::Keep)) {
            // Nothing to write, so no prewrite checks the basis: it stands
            // only if it was a snapshot, which reading the keys again shows
            // (as `read.rs` argues). Otherwise `apply` runs on what they hold.
            let again = basis(shared, &names).await?;
            trips += 1;
            if again.1 == held {
                shared.trips.note(trips);
                return Ok(());
            }
            if started.elapsed() > CALL_LIMIT {
                break;
            }
            next = Some(again);
            continue;
        }
        if let Err(short) = admission.hold(added, removed) {
            store.refresh_bound_if_due();
            return Err(store.full(short));
        }
        let txn = format!("{:016x}", shared.token());
        let step = Step { shared: &store.shared, names: &names, groups: &groups, txn: &txn };
        // The prewrites and the commit (the settle is not waited for).
        trips += 2;
        match step.run(&held, &ops, now, guessed).await? {
            Tried::Committed { acked } => {
                shared.remember_written(hashes, ops, &held);
                admission.commit();
                shared.trips.note(trips);
                store.refresh_bound_if_due();
                // Written, but a failover now could lose it: not acknowledged.
                let wanted = shared.batcher.min_acked;
                return if acked < u64::from(wanted) { Err(unacked(acked, wanted)) } else { Ok(()) };
            }
            Tried::Again if started.elapsed() > CALL_LIMIT => break,
            // A wrong guess: the next try reads.
            Tried::Again if guessed => {}
            Tried::Again => {
                // Apart, so that updates racing for the same keys don't meet again.
                let spread = 1 + (shared.token() % (1 << missed.min(5)));
                missed += 1;
                tokio::time::sleep(std::time::Duration::from_micros(200 * spread)).await;
            }
        }
    }
    Err(StoreError::unavailable(
        Unavailable::StoreFailed,
        "other updates kept changing these keys (in several hash slots) while this update ran; it wrote nothing",
    ))
}

/// One try of update `txn` on `names`, grouped by slot (the primary key's,
/// `names[0]`, first).
struct Step<'a> {
    shared: &'a Arc<Shared>,
    names: &'a [String],
    groups: &'a [Vec<usize>],
    txn: &'a str,
}

impl Step<'_> {
    /// One try on `held` at `now`; a `guessed` basis has its clock checked
    /// by the prewrites.
    async fn run(&self, held: &[Raw], ops: &[Op], now: Millis, guessed: bool) -> Result<Tried, StoreError> {
        let shared: &Shared = self.shared;
        let primary = &self.names[0];
        let record = record(shared, primary, self.txn);
        let grace = shared.grace;
        // Each key's lock, and the lock's own PXAT; the record outlives them all.
        let mut locks = Vec::with_capacity(held.len());
        for (old, op) in held.iter().zip(ops) {
            let old_pxat = expires_at(old).map_or(0, |at| at.saturating_add(grace));
            let (new, new_pxat) = match op {
                Op::Keep => (old.clone(), old_pxat),
                Op::Delete => (Raw::none(), 0),
                Op::Put { raw, pxat } => (raw.clone(), *pxat),
            };
            let pxat = old_pxat.max(new_pxat).max(now.saturating_add(LOCK_LIFE_MS));
            locks.push((body(primary, old, old_pxat, &new, new_pxat), pxat));
        }
        let record_pxat = locks.iter().map(|l| l.1).max().unwrap_or(now).saturating_add(RECORD_MARGIN_MS);
        let prewrite = |group: &Vec<usize>, first: bool| {
            let mut call = Call::new(Kind::Prewrite);
            for &i in group {
                call.key(&self.names[i]);
            }
            if first {
                call.key(&record);
            }
            call.arg(self.txn).arg(if first { LEASE_MS } else { 0 });
            let (lead, lag) = if guessed { (MAX_LEAD_MS, MAX_LAG_MS) } else { (-1, -1) };
            call.arg(now).arg(lead).arg(lag);
            for &i in group {
                call.arg(held[i].as_bytes()).arg(&locks[i].0).arg(locks[i].1);
            }
            // The other slots' locks must reach the replicas the store asks
            // for before the commit point: a failover that lost one would
            // leave that key's old entry beside a committed update.
            let replicas = if first { 0 } else { shared.batcher.min_acked };
            async move {
                let (answer, acked) = super::steps::send(shared, call, replicas).await?;
                Ok::<_, redis::RedisError>((redis::from_redis_value::<Vec<redis::Value>>(answer)?, acked))
            }
        };
        // Every slot at once. A prewrite of the primary's slot that lands
        // after a reader met a lock of this try elsewhere and wrote `A` finds
        // that record and writes nothing (`PROTOCOL.md`).
        let (first, others) = futures_util::future::join(
            prewrite(&self.groups[0], true),
            futures_util::future::join_all(self.groups[1..].iter().map(|g| prewrite(g, false))),
        )
        .await;
        // Whether any slot may hold a lock of this try (a failed call may have).
        let mut locked = false;
        let (mut failure, mut missed, mut short) = (None, false, None);
        match first {
            Ok((answer, _)) if status(&answer) == Some(1) => locked = true,
            Ok(_) => missed = true,
            Err(e) => failure = Some(e),
        }
        let mut met = Vec::new();
        for (group, answer) in self.groups[1..].iter().zip(others) {
            match answer {
                Ok((answer, acked)) if status(&answer) == Some(1) => {
                    locked = true;
                    if acked < u64::from(shared.batcher.min_acked) {
                        short = Some(short.map_or(acked, |s: u64| s.min(acked)));
                    }
                }
                Ok((answer, _)) => {
                    missed = true;
                    // Another update's lock on one of these keys: resolve it
                    // after this one is rolled back, so neither waits on the other.
                    for (&i, value) in group.iter().zip(answer.into_iter().skip(2)) {
                        if let redis::Value::BulkString(bytes) = value {
                            let raw = Raw::from_bytes(bytes);
                            if super::is_lock(&raw) {
                                met.push((self.names[i].clone(), raw));
                            }
                        }
                    }
                }
                Err(e) => failure = Some(e),
            }
        }
        if failure.is_none() && missed && !locked {
            // Every slot answered that it wrote nothing: nothing to roll back.
            return Ok(Tried::Again);
        }
        if failure.is_some() || missed || short.is_some() {
            self.abort(&record, record_pxat).await;
            if let Some(e) = failure {
                return Err(failed(e));
            }
            if let Some(acked) = short {
                return Err(unacked(acked, shared.batcher.min_acked));
            }
            let started = Instant::now();
            for (name, raw) in met {
                resolve(shared, &name, &raw, started).await?;
            }
            return Ok(Tried::Again);
        }
        // The commit point: the primary key's lock becomes its new entry and
        // the record says `C`, in one step on the primary's slot.
        let group = |g: &Vec<usize>| g.iter().map(|&i| self.names[i].clone()).collect::<Vec<_>>();
        let commit = Some((record.as_str(), record_pxat));
        let replicas = shared.batcher.min_acked;
        let acked = match settle_acked(shared, &group(&self.groups[0]), self.txn, "C", commit, replicas).await? {
            (true, acked) => acked,
            (false, _) => {
                // A reader rolled it back (its lease was over): nothing of it stays.
                self.abort(&record, record_pxat).await;
                return Ok(Tried::Again);
            }
        };
        // Committed: the other slots' locks become their new entries, in the
        // next calls to their nodes (the count is answered now; its settles
        // are queued before, so they usually land before a next update of
        // these keys from this store), or at the next reader that meets them.
        for g in &self.groups[1..] {
            super::steps::leave(self.shared, settle_call(&group(g), self.txn, "C", None));
        }
        Ok(Tried::Committed { acked })
    }

    /// Rolls this try back: `A` on the primary's slot (which rolls back its
    /// keys and keeps a late prewrite out), then the other slots. What fails
    /// here is left to readers: the lease runs out and they roll it back.
    async fn abort(&self, record: &str, record_pxat: Millis) {
        let group = |g: &Vec<usize>| g.iter().map(|&i| self.names[i].clone()).collect::<Vec<_>>();
        let first = settle(self.shared, &group(&self.groups[0]), self.txn, "A", Some((record, record_pxat))).await;
        if !matches!(first, Ok(true)) {
            return;
        }
        let rest = self.groups[1..].iter().map(|g| {
            let names = group(g);
            async move { settle(self.shared, &names, self.txn, "A", None).await }
        });
        drop(futures_util::future::join_all(rest).await);
    }
}

/// The status of a prewrite's answer `{now, status, ...}`.
fn status(answer: &[redis::Value]) -> Option<i64> {
    match answer.get(1) {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    }
}
