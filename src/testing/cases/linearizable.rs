//! Histories of concurrent calls from both handles, checked for
//! linearizability: every answer, not only the totals, is explained by one
//! order of the calls, one at a time.
//!
//! The calls count, retag (change a value only in case or accent, which a
//! store comparing folded values mistakes for no change), delete, read through
//! `apply`, and read, on few keys so that calls on one key overlap. Entries
//! live an hour, so none expires during a case.

use std::sync::Arc;

use rand::Rng;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use super::super::linearizable::{check, History};
use super::super::support::*;
use super::super::{ContractViolation, StorePair};
use crate::{Entry, LimitStore, Millis, Write};

const RULE_LINEARIZABLE: &str =
    "calls from both handles are linearizable: each takes effect at one instant between its call and its answer";

/// How long an entry written by a case lives: longer than any case runs.
const LIFE: Millis = 3_600_000;

/// Spellings that a case- and accent-insensitive comparison takes as one.
const TAGS: [&str; 4] = ["e", "E", "é", "É"];

#[derive(Clone, Copy)]
enum Kind {
    Count,
    Retag,
    Delete,
    Keep,
    Read,
}

fn pick(rng: &mut impl Rng) -> Kind {
    match rng.random_range(0..20) {
        0..8 => Kind::Count,
        8..12 => Kind::Retag,
        12 => Kind::Delete,
        13..15 => Kind::Keep,
        _ => Kind::Read,
    }
}

fn tag(entry: &Option<Entry>) -> &str {
    entry.as_ref().and_then(|e| e.value.get("t")).and_then(Value::as_str).unwrap_or(TAGS[0])
}

/// What one kind of update writes over what it sees.
fn write(kind: Kind, seen: &Option<Entry>, now: Millis) -> Write {
    let expires_at = seen.as_ref().map_or(now + LIFE, |e| e.expires_at);
    match kind {
        Kind::Count => Write::Put(Entry { value: json!({ "n": count(seen) + 1, "t": tag(seen) }), expires_at }),
        Kind::Retag => {
            let next = TAGS[(TAGS.iter().position(|t| *t == tag(seen)).unwrap_or(0) + 1) % TAGS.len()];
            Write::Put(Entry { value: json!({ "n": count(seen), "t": next }), expires_at })
        }
        Kind::Delete => Write::Delete,
        Kind::Keep | Kind::Read => Write::Keep,
    }
}

/// One call of `kind` on `keys`, recorded in `history`.
async fn call(history: &History, store: &dyn LimitStore, keys: &[&str], kind: Kind) -> Outcome {
    if let Kind::Read = kind {
        return answered(history.read(store, keys).await, "a read").map(drop);
    }
    let mut apply = |seen: &[Option<Entry>], now: Millis| seen.iter().map(|e| write(kind, e, now)).collect();
    answered(history.update(store, keys, &mut apply).await, "an update")
}

/// Runs `tasks` tasks on alternating handles, each making `each` calls on
/// the keys `choose` picks, then checks the history.
async fn run_and_check(
    pair: StorePair,
    tasks: usize,
    each: usize,
    keys: Vec<String>,
    choose: fn(&mut rand::rngs::ThreadRng, &[String]) -> Vec<String>,
) -> Outcome {
    let history = History::new();
    let keys = Arc::new(keys);
    let mut running = JoinSet::new();
    for t in 0..tasks {
        let (store, keys, history) = (handle(&pair, t), keys.clone(), history.clone());
        running.spawn(async move {
            for _ in 0..each {
                let (picked, kind) = {
                    let mut rng = rand::rng();
                    (choose(&mut rng, &keys), pick(&mut rng))
                };
                call(&history, &*store, &refs(&picked), kind).await?;
            }
            Ok(())
        });
    }
    join_all(running).await?;
    check(&history.operations())
        .map_err(|e| ContractViolation::new(RULE_LINEARIZABLE, "a history with a linearization", e.to_string()))
}

/// Tasks on both handles count, retag, delete and read four keys, one key
/// per call: the history is linearizable.
pub async fn single_key_histories_are_linearizable(pair: StorePair) -> Outcome {
    fn one(rng: &mut rand::rngs::ThreadRng, keys: &[String]) -> Vec<String> {
        vec![keys[rng.random_range(0..keys.len())].clone()]
    }
    run_and_check(pair, 8, 30, unique_keys(4), one).await
}

/// Tasks on both handles count, retag, delete and read one to three keys of
/// a group in one call, in any order: the history of each group is
/// linearizable, so no call was torn or interleaved with another.
pub async fn multi_key_histories_are_linearizable(pair: StorePair) -> Outcome {
    fn some_of_a_group(rng: &mut rand::rngs::ThreadRng, keys: &[String]) -> Vec<String> {
        let group = rng.random_range(0..keys.len() / 3) * 3;
        let mut picked: Vec<String> = keys[group..group + 3].to_vec();
        for i in (1..picked.len()).rev() {
            picked.swap(i, rng.random_range(0..=i));
        }
        picked.truncate(rng.random_range(1..=3));
        picked
    }
    run_and_check(pair, 8, 30, unique_keys(9), some_of_a_group).await
}
