//! One update's compare-and-set as the write script takes it (see
//! `script.rs`): what it carries, the script's arguments for a batch of
//! them, and how each went, read back from the script's answer.

use redis::Value;

use super::entry::Raw;
use super::family::{push_tag, Tag};
use super::script::raw;
use super::{failed, refused};
use crate::bound::FamilyId;
use crate::key_hash::KeyHash;
use crate::{Millis, StoreError, Write};

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
    /// Nothing written: an update whose keys lie in several slots went to
    /// one node's call (`batch.rs`), and that node does not serve all of
    /// them now; it goes by the steps of `cluster/txn.rs` instead.
    SlotsApart,
}

/// Where a batch's keys go in its script call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Keys {
    /// In `KEYS` (one server, or one slot: the call is routed by them).
    Declared,
    /// After the arguments in `ARGV`, their number first (a node's script).
    InArgs,
}

/// The names of entries' and claims' keys, as the store makes them.
pub(super) struct Names<'a> {
    pub(super) entries: &'a str,
    pub(super) claims: &'a str,
    pub(super) cluster: bool,
}

/// `EVALSHA sha` of the write script with every update of `calls`: per
/// update its entries' keys then its claims', and its arguments.
pub(super) fn command<'c>(
    sha: &str,
    calls: impl Iterator<Item = &'c WriteCall> + Clone,
    names: &Names<'_>,
    keys: Keys,
) -> redis::Cmd {
    let n_keys: usize = calls.clone().map(|c| 2 * c.hashes.len()).sum();
    let n_args: usize = calls.clone().map(|c| 6 + 3 * c.hashes.len()).sum();
    let mut cmd = redis::Cmd::with_capacity(4 + n_keys + n_args, 0);
    cmd.arg("EVALSHA").arg(sha);
    match keys {
        Keys::Declared => {
            cmd.arg(n_keys);
            push_keys(&mut cmd, calls.clone(), names);
            push_args(&mut cmd, calls);
        }
        Keys::InArgs => {
            cmd.arg(0).arg(n_args);
            push_args(&mut cmd, calls.clone());
            push_keys(&mut cmd, calls, names);
        }
    }
    cmd
}

fn push_keys<'c>(cmd: &mut redis::Cmd, calls: impl Iterator<Item = &'c WriteCall>, names: &Names<'_>) {
    let mut name = String::with_capacity(names.claims.len().max(names.entries.len()) + 69);
    for call in calls {
        for (hash, &tag) in call.hashes.iter().zip(&call.tags) {
            name.clear();
            name.push_str(names.entries);
            push_tag(&mut name, tag);
            super::cluster::push_hash(&mut name, hash, names.cluster);
            cmd.arg(name.as_str());
        }
        for hash in &call.hashes {
            name.clear();
            name.push_str(names.claims);
            super::cluster::push_hash(&mut name, hash, names.cluster);
            cmd.arg(name.as_str());
        }
    }
}

fn push_args<'c>(cmd: &mut redis::Cmd, calls: impl Iterator<Item = &'c WriteCall>) {
    for call in calls {
        let claim = if call.claim { "1" } else { "0" };
        cmd.arg(call.hashes.len()).arg(call.at).arg(call.lead).arg(call.lag.unwrap_or(-1)).arg(call.token).arg(claim);
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
}

/// An update a node's script could not read there (its slot is served
/// elsewhere, or moving): nothing of it was written. The node's error.
#[derive(Debug)]
pub(super) struct Elsewhere(pub(super) String);

/// The next update's answer in the script's answer, for an update of `n` keys.
pub(super) fn answer(
    answers: &mut impl Iterator<Item = Value>,
    now: Millis,
    n: usize,
    readonly: &mut bool,
) -> Result<Result<Written, StoreError>, Elsewhere> {
    let status = answers.next();
    let held = |answers: &mut dyn Iterator<Item = Value>| {
        (0..n).map(|_| raw(answers.next().unwrap_or(Value::Nil))).collect::<redis::RedisResult<_>>().map_err(failed)
    };
    let error = |answers: &mut dyn Iterator<Item = Value>| match answers.next() {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(&b).into_owned(),
        Some(Value::SimpleString(s)) => s,
        other => format!("{other:?}"),
    };
    Ok(match status {
        Some(Value::Int(1)) => Ok(Written::Done { now }),
        Some(Value::Int(0)) => held(answers).map(|held| Written::Changed { now, held }),
        Some(Value::Int(2)) => held(answers).map(|held| Written::Claimed { now, held }),
        Some(Value::Int(3)) => {
            let error = error(answers);
            *readonly |= error.starts_with("READONLY");
            Err(refused(error))
        }
        Some(Value::Int(4)) => return Err(Elsewhere(error(answers))),
        other => Err(failed(super::script::unexpected(format!("the write script answered {other:?} for an update")))),
    })
}

/// The operations for `writes` on keys of `families` that hold `held`, and
/// the families of the entries they add and of those they remove.
pub(super) fn ops(
    writes: Vec<Write>,
    held: &[Raw],
    families: &[FamilyId],
    grace: Millis,
) -> (Vec<Op>, Vec<FamilyId>, Vec<FamilyId>) {
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let ops = writes
        .into_iter()
        .zip(held)
        .zip(families)
        .map(|((write, raw), &family)| match write {
            Write::Keep => Op::Keep,
            Write::Delete if raw.is_some() => {
                removed.push(family);
                Op::Delete
            }
            // Deleting what is not there changes nothing; the key is still checked.
            Write::Delete => Op::Keep,
            Write::Put(entry) => {
                if !raw.is_some() {
                    added.push(family);
                }
                Op::Put { raw: Raw::encode(&entry), pxat: entry.expires_at.saturating_add(grace) }
            }
        })
        .collect();
    (ops, added, removed)
}
