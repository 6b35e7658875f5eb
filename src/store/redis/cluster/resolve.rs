//! A lock met by a reader (see `PROTOCOL.md`). A read for a caller sees
//! through it ([`seen_through`]): the update's record on its primary key's
//! slot says whether it committed, and the key reads as its new entry if
//! so, its old one if not; nothing is written and nothing waited for. An
//! update, which must write over the key, resolves it ([`resolve`]): it
//! polls the record until it holds an outcome, or the lock's lease is over
//! and the reader records the rollback itself, then settles the key to that
//! outcome: committed, the lock rolls forward to its new entry; rolled
//! back, to its old one.

use std::time::{Duration, Instant};

use redis::Value;

use super::super::entry::Raw;
use super::super::CALL_LIMIT;
use super::super::{failed, Shared};
use super::lock::Lock;
use super::scripts::{Call, Kind};
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// How long the record of a rolled-back update lives (ms): longer than any
/// update's steps may take, so a late prewrite of it finds the record.
pub(super) const ABORTED_MS: u64 = 60_000;
/// The longest a reader waits between two looks at a live update's record.
const POLL_MAX: Duration = Duration::from_millis(5);

/// The record of update `txn` whose primary key is `primary` (same slot).
pub(super) fn record(shared: &Shared, primary: &str, txn: &str) -> String {
    // `<names><tag>:{<hash>}`: the record is `<prefix>:txn:<gen>:{<hash>}:<txn>`,
    // outside the generation's keys, so `SCAN` of the entries skips it.
    let hash = primary.get(shared.names.len() + 5..).unwrap_or(primary);
    let names = shared.names.strip_suffix(':').unwrap_or(&shared.names);
    let (prefix, generation) = names.rsplit_once(':').unwrap_or((names, ""));
    format!("{prefix}:txn:{generation}:{hash}:{txn}")
}

/// The lock `raw` met on `name`, parsed; a lock that does not parse is
/// corrupt data.
fn parse(name: &str, raw: &Raw) -> Result<Lock, StoreError> {
    Lock::parse(raw).ok_or_else(|| StoreError::Corrupt {
        key_hash: name.rsplit(':').next().unwrap_or_default().to_owned(),
        detail: "the key holds a lock that does not parse".to_owned(),
        source: None,
    })
}

/// The outcome in an update's `record` (`"C"` or `"A"`), or `None` while
/// it has none; reads only.
async fn peek(shared: &Shared, record: &str) -> Result<Option<&'static str>, StoreError> {
    let held: Option<Vec<u8>> =
        redis::cmd("GET").arg(record).query_async(&mut shared.link.conn()).await.map_err(failed)?;
    match held.as_deref() {
        None => Ok(None),
        Some(b"C") => Ok(Some("C")),
        Some(b"A") => Ok(Some("A")),
        Some(other) => Err(failed(super::super::script::unexpected(format!(
            "an update's record holds {:?}",
            String::from_utf8_lossy(other)
        )))),
    }
}

/// What the lock `raw` on `name` reads as, writing nothing: its new entry
/// once its update's record says committed, its old entry otherwise (no
/// record yet: the update had not committed when the lock was read, as a
/// commit writes its record in the step that makes it).
pub(super) async fn seen_through(shared: &Shared, name: &str, raw: &Raw) -> Result<Raw, StoreError> {
    let lock = parse(name, raw)?;
    Ok(match peek(shared, &record(shared, &lock.primary, &lock.txn)).await? {
        Some("C") => lock.new,
        _ => lock.old,
    })
}

/// Resolves the lock `raw` met on `name`, whose node's clock read `at` in
/// an answer that arrived by `seen`: polls its update's record while the
/// lease lasts; past it, records the rollback unless an outcome exists;
/// then settles the key to the outcome (the caller reads the key again).
/// Gives up (unavailable) past [`CALL_LIMIT`] from `started`.
pub(super) async fn resolve(
    shared: &Shared,
    name: &str,
    raw: &Raw,
    at: Millis,
    seen: Instant,
    started: Instant,
) -> Result<(), StoreError> {
    let lock = parse(name, raw)?;
    let record = record(shared, &lock.primary, &lock.txn);
    // The node's clock was at least `at` when the answer arrived, so the
    // lease is surely over once this much has passed here since then.
    let lease_over = seen + Duration::from_millis(u64::try_from(lock.lease.saturating_sub(at)).unwrap_or(0));
    let give_up = || {
        StoreError::unavailable(
            Unavailable::StoreFailed,
            "a key of this update is locked by another update that is still within its lease; nothing was written",
        )
    };
    let mut pause = Duration::from_millis(1);
    let outcome = loop {
        if Instant::now() < lease_over {
            if let Some(outcome) = peek(shared, &record).await? {
                break outcome;
            }
            if started.elapsed() > CALL_LIMIT {
                return Err(give_up());
            }
            tokio::time::sleep(pause.min(lease_over.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(POLL_MAX);
            continue;
        }
        let mut call = Call::new(Kind::Resolve);
        call.key(&lock.primary).key(&record).arg(&lock.txn).arg(ABORTED_MS);
        let answer: Vec<Value> = call.invoke(&mut shared.link.conn()).await.map_err(failed)?;
        match answer.get(1) {
            Some(Value::BulkString(b)) if b == b"C" => break "C",
            Some(Value::BulkString(b)) if b == b"A" => break "A",
            // An earlier version's lock on the primary key, within its lease.
            Some(Value::BulkString(b)) if b == b"W" => {
                let left = match answer.get(2) {
                    Some(Value::Int(ms)) => u64::try_from(*ms).unwrap_or(1),
                    _ => 1,
                };
                if started.elapsed() > CALL_LIMIT {
                    return Err(give_up());
                }
                tokio::time::sleep(Duration::from_millis(left).clamp(Duration::from_millis(1), POLL_MAX)).await;
            }
            other => {
                return Err(failed(super::super::script::unexpected(format!("the resolve script answered {other:?}"))))
            }
        }
    };
    settle(shared, std::slice::from_ref(&name.to_owned()), &lock.txn, outcome, None).await.map(drop)
}

/// Settles `names` (keys of one slot) that hold update `txn`'s lock to
/// `outcome`; with `record` (its name and `PXAT`), the outcome is written
/// there in the same step unless the record says otherwise. Answers whether
/// it was done.
/// It goes in the next call to its node with the other steps ready then
/// (`steps.rs`).
pub(super) async fn settle(
    shared: &Shared,
    names: &[String],
    txn: &str,
    outcome: &str,
    record: Option<(&str, i64)>,
) -> Result<bool, StoreError> {
    let call = settle_call(names, txn, outcome, record);
    let (done, _) = super::steps::send(shared, call, 0).await.map_err(failed)?;
    Ok(matches!(done, Value::Int(1)))
}

/// The call that settles `names` as [`settle`] does.
pub(super) fn settle_call(names: &[String], txn: &str, outcome: &str, record: Option<(&str, i64)>) -> Call {
    let mut call = Call::new(Kind::Settle);
    for name in names {
        call.key(name);
    }
    call.arg(txn).arg(outcome).arg("0");
    match record {
        Some((record, pxat)) => call.key(record).arg(pxat),
        None => call.arg("0"),
    };
    call
}
