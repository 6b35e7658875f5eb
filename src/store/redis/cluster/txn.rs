//! An update over keys in several hash slots, in the steps `PROTOCOL.md`
//! argues for: read every key (a script per slot), run `apply`, prewrite a
//! lock with the new entry on every key outside the primary key's slot
//! (those slots at once), commit on the primary's slot (its keys checked
//! and written, and the outcome recorded, in one step), then settle the
//! other slots' locks to their new entries in the background: the count is
//! answered at the commit.

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
use super::resolve::{record, resolve, settle, settle_call};
use super::scripts::{Call, Kind};
use crate::bound::FamilyId;
use crate::error::Unavailable;
use crate::key_hash::KeyHash;
use crate::rules::run_apply;
use crate::server_clock::{MAX_LAG_MS, MAX_LEAD_MS};
use crate::{Apply, Millis, StoreError};

/// How long a lock holds its key before a reader may roll its update back
/// (ms, on the clock of the key's node).
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
    /// by the prewrites and the commit.
    async fn run(&self, held: &[Raw], ops: &[Op], now: Millis, guessed: bool) -> Result<Tried, StoreError> {
        let shared: &Shared = self.shared;
        let primary = &self.names[0];
        let record = record(shared, primary, self.txn);
        let grace = shared.grace;
        let (lead, lag) = if guessed { (MAX_LEAD_MS, MAX_LAG_MS) } else { (-1, -1) };
        // Each key's new entry and `PXAT` (`None`: it keeps what it holds),
        // and a lock's `PXAT`: the lock outlives both entries and the steps;
        // the record outlives every lock.
        let mut news = Vec::with_capacity(held.len());
        let mut record_pxat = now;
        for (old, op) in held.iter().zip(ops) {
            let old_pxat = expires_at(old).map_or(0, |at| at.saturating_add(grace));
            let (new, new_pxat) = match op {
                Op::Keep => (None, old_pxat),
                Op::Delete => (Some(Raw::none()), 0),
                Op::Put { raw, pxat } => (Some(raw.clone()), *pxat),
            };
            let lock_pxat = old_pxat.max(new_pxat).max(now.saturating_add(LOCK_LIFE_MS));
            record_pxat = record_pxat.max(lock_pxat);
            news.push((new, new_pxat, old_pxat, lock_pxat));
        }
        let record_pxat = record_pxat.saturating_add(RECORD_MARGIN_MS);
        let prewrite = |group: &Vec<usize>| {
            let mut call = Call::new(Kind::Prewrite);
            for &i in group {
                call.key(&self.names[i]);
            }
            call.arg(self.txn).arg(LEASE_MS).arg(now).arg(lead).arg(lag);
            for &i in group {
                let (new, new_pxat, old_pxat, lock_pxat) = &news[i];
                let new = new.as_ref().unwrap_or(&held[i]);
                call.arg(held[i].as_bytes()).arg(body(primary, &held[i], *old_pxat, new, *new_pxat)).arg(*lock_pxat);
            }
            // The locks must reach the replicas the store asks for before
            // the commit point: a failover that lost one would leave that
            // key's old entry beside a committed update.
            let replicas = shared.batcher.min_acked;
            async move {
                let (answer, acked) = super::steps::send(shared, call, replicas).await?;
                Ok::<_, redis::RedisError>((redis::from_redis_value::<Vec<redis::Value>>(answer)?, acked))
            }
        };
        // Every slot but the primary's, at once.
        let others = futures_util::future::join_all(self.groups[1..].iter().map(prewrite)).await;
        let seen = Instant::now();
        // Whether any slot may hold a lock of this try (a failed call may have).
        let (mut locked, mut failure, mut missed, mut short) = (false, None, false, None);
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
                    let at = match answer.first() {
                        Some(redis::Value::Int(at)) => *at,
                        _ => Millis::MAX,
                    };
                    for (&i, value) in group.iter().zip(answer.into_iter().skip(2)) {
                        if let redis::Value::BulkString(bytes) = value {
                            let raw = Raw::from_bytes(bytes);
                            if super::is_lock(&raw) {
                                met.push((self.names[i].clone(), raw, at));
                            }
                        }
                    }
                }
                Err(e) => {
                    locked = true;
                    failure = Some(e);
                }
            }
        }
        if failure.is_some() || missed || short.is_some() {
            if locked {
                self.abort(&record, record_pxat).await;
            }
            if let Some(e) = failure {
                return Err(failed(e));
            }
            if let Some(acked) = short {
                return Err(unacked(acked, shared.batcher.min_acked));
            }
            let started = Instant::now();
            for (name, raw, at) in met {
                resolve(shared, &name, &raw, at, seen, started).await?;
            }
            return Ok(Tried::Again);
        }
        // The commit point: if the primary's slot holds what was read, its
        // keys take their new entries and the record says `C`, in one step;
        // if not, the record says `A` there.
        let mut commit = Call::new(Kind::Commit);
        for &i in &self.groups[0] {
            commit.key(&self.names[i]);
        }
        commit.key(&record).arg(self.txn).arg(now).arg(lead).arg(lag).arg(record_pxat);
        for &i in &self.groups[0] {
            commit.arg(held[i].as_bytes());
            match &news[i] {
                (Some(new), pxat, _, _) => commit.arg(new.as_bytes()).arg(*pxat),
                (None, _, _, _) => commit.arg("").arg("K"),
            };
        }
        let (answer, acked) = super::steps::send(shared, commit, shared.batcher.min_acked).await.map_err(failed)?;
        let answer: Vec<redis::Value> = redis::from_redis_value(answer).map_err(|e| failed(e.into()))?;
        let group = |g: &Vec<usize>| g.iter().map(|&i| self.names[i].clone()).collect::<Vec<_>>();
        // Decided: the other slots' locks become their new entries (or
        // their old ones), in the next calls to their nodes (the count is
        // answered now; its settles are queued before, so they usually land
        // before a next update of these keys from this store), or at the
        // next reader that meets them.
        let outcome = if status(&answer) == Some(1) { "C" } else { "A" };
        for g in &self.groups[1..] {
            super::steps::leave(self.shared, settle_call(&group(g), self.txn, outcome, None));
        }
        if outcome == "C" {
            Ok(Tried::Committed { acked })
        } else {
            // A key of the primary's slot changed, the clock was out of
            // bounds, or a reader rolled it back: nothing of it stays.
            Ok(Tried::Again)
        }
    }

    /// Rolls this try back: `A` on the primary's slot (which keeps a late
    /// commit out), then the other slots. What fails here is left to
    /// readers: the locks' leases run out and they roll them back.
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

/// The status of a prewrite's or a commit's answer `{now, status, ...}`.
fn status(answer: &[redis::Value]) -> Option<i64> {
    match answer.get(1) {
        Some(redis::Value::Int(n)) => Some(*n),
        _ => None,
    }
}
