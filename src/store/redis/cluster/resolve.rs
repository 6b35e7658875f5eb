//! A reader that meets a lock resolves it from the update's primary key
//! (see `PROTOCOL.md`): committed there, the lock rolls forward to its new
//! entry; rolled back there (or its lease over, which rolls it back), to its
//! old entry; still within its lease, the reader waits for it.

use std::time::{Duration, Instant};

use redis::Value;

use super::super::entry::Raw;
use super::super::CALL_LIMIT;
use super::super::{failed, Shared};
use super::lock::Lock;
use super::scripts::{Call, Kind};
use crate::error::Unavailable;
use crate::StoreError;

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

/// Resolves the lock `raw` met on `name`: waits while its update is within
/// its lease, then settles the key to the update's outcome. Gives up
/// (unavailable) past [`CALL_LIMIT`] from `started`.
pub(super) async fn resolve(shared: &Shared, name: &str, raw: &Raw, started: Instant) -> Result<(), StoreError> {
    let Some(lock) = Lock::parse(raw) else {
        return Err(StoreError::Corrupt {
            key_hash: name.rsplit(':').next().unwrap_or_default().to_owned(),
            detail: "the key holds a lock that does not parse".to_owned(),
            source: None,
        });
    };
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
/// `outcome`; with `commit`, the first key must still hold the lock (the
/// commit point), and the record (`record`, its `PXAT`) is written in the
/// same step. Answers whether it was done.
pub(super) async fn settle(
    shared: &Shared,
    names: &[String],
    txn: &str,
    outcome: &str,
    commit: Option<(&str, i64)>,
) -> Result<bool, StoreError> {
    settle_acked(shared, names, txn, outcome, commit, 0).await.map(|(done, _)| done)
}

/// [`settle`], followed on the same node by `WAIT replicas` when
/// `replicas` > 0: whether it was done, and how many replicas acknowledged
/// it (`u64::MAX` when none were asked for). It goes in the next call to its
/// node with the other steps ready then (`steps.rs`).
pub(super) async fn settle_acked(
    shared: &Shared,
    names: &[String],
    txn: &str,
    outcome: &str,
    commit: Option<(&str, i64)>,
    replicas: u32,
) -> Result<(bool, u64), StoreError> {
    let call = settle_call(names, txn, outcome, commit);
    let (done, acked) = super::steps::send(shared, call, replicas).await.map_err(failed)?;
    Ok((matches!(done, Value::Int(1)), acked))
}

/// The call that settles `names` as [`settle`] does.
pub(super) fn settle_call(names: &[String], txn: &str, outcome: &str, commit: Option<(&str, i64)>) -> Call {
    let mut call = Call::new(Kind::Settle);
    for name in names {
        call.key(name);
    }
    call.arg(txn).arg(outcome);
    match commit {
        Some((record, pxat)) => {
            call.key(record).arg(if outcome == "C" { "1" } else { "0" }).arg(pxat);
        }
        None => {
            call.arg("0").arg("0");
        }
    }
    call
}
