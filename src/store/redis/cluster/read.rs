//! Reading keys of several slots: one read script per slot, sent at once;
//! the update's clock is the latest of the nodes' `TIME`s.
//!
//! An update's basis ([`basis`]) has every lock it meets resolved
//! (`resolve.rs`) and its keys read again, so that `apply` never sees a
//! lock and the update's writes find entries: its prewrites (or, when it
//! writes nothing, a second pass: `txn.rs`) check that the basis held.
//!
//! A read for a caller ([`snapshot`]) writes nothing and waits for no one:
//! a lock reads as the entry its update leaves as things stand (its new one
//! once committed, its old one until then). One pass is not a snapshot
//! (each slot is read at its own instant, and a committed lock's entry at
//! the instant of its commit or after), so the keys are read again, after
//! the first pass answered, until two passes agree: every key then held
//! what was read at one instant between them (`PROTOCOL.md`).

use std::time::Instant;

use super::super::entry::Raw;
use super::super::CALL_LIMIT;
use super::super::{failed, Shared};
use super::lock::is_lock;
use super::resolve::{resolve, seen_through};
use crate::error::Unavailable;
use crate::{Millis, StoreError};

/// The entries of `names` and the clock, as a caller reads them: a
/// snapshot, with the locks of updates in flight seen through.
pub(in crate::store::redis) async fn snapshot(
    shared: &Shared,
    names: &[String],
) -> Result<(Millis, Vec<Raw>), StoreError> {
    let started = Instant::now();
    let (now, first, met_lock) = seen(shared, names).await?;
    let one_slot =
        names.windows(2).all(|w| super::slot_of_name(w[0].as_bytes()) == super::slot_of_name(w[1].as_bytes()));
    if one_slot && !met_lock {
        // One script read every key at one instant.
        return Ok((now, first));
    }
    let mut last = first;
    loop {
        let (now, again, _) = seen(shared, names).await?;
        if again == last {
            return Ok((now, again));
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

/// One pass of `names` with each lock read as the entry its update leaves
/// (writing nothing); whether any lock was met.
async fn seen(shared: &Shared, names: &[String]) -> Result<(Millis, Vec<Raw>, bool), StoreError> {
    let (now, mut held, _, _) = read_once(shared, names).await?;
    let mut met_lock = false;
    for (name, raw) in names.iter().zip(held.iter_mut()) {
        if is_lock(raw) {
            met_lock = true;
            *raw = seen_through(shared, name, raw).await?;
        }
    }
    Ok((now, held, met_lock))
}

/// The keys' entries, read as one update's basis: each key as its slot held
/// it, every lock met resolved first; not a snapshot until a prewrite or a
/// second pass checks it.
pub(in crate::store::redis) async fn basis(
    shared: &Shared,
    names: &[String],
) -> Result<(Millis, Vec<Raw>), StoreError> {
    let started = Instant::now();
    loop {
        let (now, held, at, seen) = read_once(shared, names).await?;
        if !held.iter().any(is_lock) {
            return Ok((now, held));
        }
        if started.elapsed() > CALL_LIMIT {
            return Err(StoreError::unavailable(
                Unavailable::StoreFailed,
                "keys of this update stayed locked by other updates across slots; nothing was written",
            ));
        }
        for ((name, raw), &at) in names.iter().zip(&held).zip(&at) {
            if is_lock(raw) {
                resolve(shared, name, raw, at, seen, started).await?;
            }
        }
    }
}

/// One read of `names`, a script per slot: the update's clock (the latest
/// node's), the entries, the clock of the node each was read on, and when
/// the answers were in.
async fn read_once(shared: &Shared, names: &[String]) -> Result<(Millis, Vec<Raw>, Vec<Millis>, Instant), StoreError> {
    let groups = by_slot(names.iter().map(|n| super::slot_of_name(n.as_bytes())));
    let calls = groups.iter().map(|group| {
        let names: Vec<String> = group.iter().map(|&i| names[i].clone()).collect();
        let mut conn = shared.link.conn();
        async move { shared.scripts.read(&mut conn, &names).await }
    });
    let answers = futures_util::future::join_all(calls).await;
    let seen = Instant::now();
    let mut held = vec![Raw::none(); names.len()];
    let mut read_at = vec![Millis::MIN; names.len()];
    let mut now = Millis::MIN;
    for (group, answer) in groups.iter().zip(answers) {
        let (at, raws) = answer.map_err(failed)?;
        now = now.max(at);
        for (&i, raw) in group.iter().zip(raws) {
            held[i] = raw;
            read_at[i] = at;
        }
    }
    shared.clock.reading(now);
    Ok((now, held, read_at, seen))
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
