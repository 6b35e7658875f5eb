//! A reader that meets a lock resolves it (see `PROTOCOL.md`): within the
//! lock's lease the reader waits for it and reads again; past it, the
//! update's record on its primary key's slot decides: committed there, the
//! lock rolls forward to its new entry; rolled back there (or no record
//! yet: the reader records the rollback), to its old entry.

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

/// The record of update `txn` whose primary key is `primary` (same slot).
pub(super) fn record(shared: &Shared, primary: &str, txn: &str) -> String {
    // `<names><tag>:{<hash>}`: the record is `<prefix>:txn:<gen>:{<hash>}:<txn>`,
    // outside the generation's keys, so `SCAN` of the entries skips it.
    let hash = primary.get(shared.names.len() + 5..).unwrap_or(primary);
    let names = shared.names.strip_suffix(':').unwrap_or(&shared.names);
    let (prefix, generation) = names.rsplit_once(':').unwrap_or((names, ""));
    format!("{prefix}:txn:{generation}:{hash}:{txn}")
}

/// Resolves the lock `raw` met on `name` when its node's clock read `at`:
/// within the lock's lease, waits a little and leaves it (the caller reads
/// the key again); past it, settles the key to the update's outcome. Gives
/// up (unavailable) past [`CALL_LIMIT`] from `started`.
pub(super) async fn resolve(
    shared: &Shared,
    name: &str,
    raw: &Raw,
    at: Millis,
    started: Instant,
) -> Result<(), StoreError> {
    let Some(lock) = Lock::parse(raw) else {
        return Err(StoreError::Corrupt {
            key_hash: name.rsplit(':').next().unwrap_or_default().to_owned(),
            detail: "the key holds a lock that does not parse".to_owned(),
            source: None,
        });
    };
    if at < lock.lease {
        let left = u64::try_from(lock.lease - at).unwrap_or(1);
        tokio::time::sleep(Duration::from_millis(left.clamp(1, 5))).await;
        return Ok(());
    }
    let record = record(shared, &lock.primary, &lock.txn);
    let outcome = loop {
        let mut call = Call::new(Kind::Resolve);
        call.key(&lock.primary).key(&record).arg(&lock.txn).arg(ABORTED_MS);
        let answer: Vec<Value> = call.invoke(&mut shared.link.conn()).await.map_err(failed)?;
        match answer.get(1) {
            Some(Value::BulkString(b)) if b == b"C" => break "C",
            Some(Value::BulkString(b)) if b == b"A" => break "A",
            Some(Value::BulkString(b)) if b == b"W" => {
                let left = match answer.get(2) {
                    Some(Value::Int(ms)) => u64::try_from(*ms).unwrap_or(1),
                    _ => 1,
                };
                if started.elapsed() > CALL_LIMIT {
                    return Err(StoreError::unavailable(
                        Unavailable::StoreFailed,
                        "a key of this update is locked by another update that is still within its lease; \
                         nothing was written",
                    ));
                }
                tokio::time::sleep(Duration::from_millis(left.clamp(1, 5))).await;
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
