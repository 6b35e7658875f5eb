//! Reading keys of several slots: one read script per slot, sent at once;
//! the update's clock is the latest of the nodes' `TIME`s. A lock met on
//! the way is resolved (`resolve.rs`) and the keys read again, so that no
//! caller ever sees a lock.
//!
//! A read for a caller is a snapshot: the keys are read twice, the second
//! time after the first answered, until both agree. Then every key held what
//! was read at one instant between the two reads: a committed update's new
//! entries replace its locks, so a key read the same both times was neither
//! locked nor changed by an update that committed in between (unless an
//! entry came back to the very same bytes: `PROTOCOL.md`). An update's basis
//! is one pass: its prewrites check it, or, when it writes nothing, a second
//! pass (`txn.rs`).

use std::time::Instant;

use super::super::entry::Raw;
use super::super::CALL_LIMIT;
use super::super::{failed, Shared};
use super::lock::is_lock;
use super::resolve::resolve;
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// The entries of `names` and the update's clock.
pub(in crate::store::redis) async fn read(shared: &Shared, names: &[String]) -> Result<(Millis, Vec<Raw>), StoreError> {
    let started = Instant::now();
    let first = unlocked(shared, names, started).await?;
    let one_slot =
        names.windows(2).all(|w| super::slot_of_name(w[0].as_bytes()) == super::slot_of_name(w[1].as_bytes()));
    if one_slot {
        return Ok(first);
    }
    let mut last = first;
    loop {
        let again = unlocked(shared, names, started).await?;
        if again.1 == last.1 {
            return Ok(again);
        }
        if started.elapsed() > CALL_LIMIT {
            return Err(StoreError::unavailable(
                Unavailable::StoreFailed,
                "other updates kept changing these keys (in several hash slots) while they were read",
            ));
        }
        last = again;
    }
}

/// The keys' entries, read as one update's basis: each key as its slot held
/// it (no lock), not a snapshot of all until a prewrite or a second pass
/// checks it.
pub(super) async fn basis(shared: &Shared, names: &[String]) -> Result<(Millis, Vec<Raw>), StoreError> {
    unlocked(shared, names, Instant::now()).await
}

/// The keys' entries, locks resolved.
async fn unlocked(shared: &Shared, names: &[String], started: Instant) -> Result<(Millis, Vec<Raw>), StoreError> {
    loop {
        let (now, held) = read_once(shared, names).await?;
        if !held.iter().any(is_lock) {
            return Ok((now, held));
        }
        if started.elapsed() > CALL_LIMIT {
            return Err(StoreError::unavailable(
                Unavailable::StoreFailed,
                "keys of this update stayed locked by other updates across slots; nothing was written",
            ));
        }
        for (name, raw) in names.iter().zip(&held) {
            if is_lock(raw) {
                resolve(shared, name, raw, started).await?;
            }
        }
    }
}

/// One read of `names`, a script per slot.
async fn read_once(shared: &Shared, names: &[String]) -> Result<(Millis, Vec<Raw>), StoreError> {
    let groups = by_slot(names.iter().map(|n| super::slot_of_name(n.as_bytes())));
    let calls = groups.iter().map(|group| {
        let names: Vec<String> = group.iter().map(|&i| names[i].clone()).collect();
        let mut conn = shared.link.conn();
        async move { shared.scripts.read(&mut conn, &names).await }
    });
    let answers = futures_util::future::join_all(calls).await;
    let mut held = vec![Raw::none(); names.len()];
    let mut now = Millis::MIN;
    for (group, answer) in groups.iter().zip(answers) {
        let (at, raws) = answer.map_err(failed)?;
        now = now.max(at);
        for (&i, raw) in group.iter().zip(raws) {
            held[i] = raw;
        }
    }
    shared.clock.reading(now);
    Ok((now, held))
}

/// The indexes of `slots`, grouped by slot, in the order each slot first
/// appears (so the first key's group comes first).
pub(super) fn by_slot(slots: impl Iterator<Item = u16>) -> Vec<Vec<usize>> {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, slot) in slots.enumerate() {
        match groups.iter_mut().find(|(s, _)| *s == slot) {
            Some((_, group)) => group.push(i),
            None => groups.push((slot, vec![i])),
        }
    }
    groups.into_iter().map(|(_, group)| group).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn groups_keep_the_first_keys_slot_first() {
        assert_eq!(super::by_slot([5, 3, 5, 9, 3].into_iter()), vec![vec![0, 2], vec![1, 4], vec![3]]);
    }
}
