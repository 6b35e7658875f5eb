//! The sequential model of the store contract, over the keys of one
//! partition: each key holds one entry or none; an update sees the live
//! entries on its own clock and its writes replace them; a read answers the
//! entries as they are.
//!
//! Entries are interned, so that a state is a short list of numbers that the
//! search can hash and compare cheaply.

use std::collections::HashMap;

use super::history::{Call, Operation};
use crate::{Entry, Millis, Write};

/// An interned entry; [`ABSENT`] is no entry.
pub(crate) type ValueId = u32;

/// No entry.
pub(crate) const ABSENT: ValueId = 0;

/// The state of a partition: one value per key, in the partition's key order.
pub(crate) type State = Vec<ValueId>;

/// Every distinct entry of a history, by number (entry `i` is id `i + 1`).
#[derive(Default)]
pub(crate) struct Values {
    entries: Vec<Entry>,
    /// Ids by expiry, then compared in full: JSON values don't hash.
    by_expiry: HashMap<Millis, Vec<ValueId>>,
}

impl Values {
    fn intern(&mut self, entry: &Option<Entry>) -> ValueId {
        let Some(entry) = entry else { return ABSENT };
        let ids = self.by_expiry.entry(entry.expires_at).or_default();
        if let Some(id) = ids.iter().find(|id| self.entries[**id as usize - 1] == *entry) {
            return *id;
        }
        self.entries.push(entry.clone());
        let id = ValueId::try_from(self.entries.len()).expect("fewer than 4 billion entries");
        ids.push(id);
        id
    }

    fn expires_at(&self, id: ValueId) -> Option<Millis> {
        (id != ABSENT).then(|| self.entries[id as usize - 1].expires_at)
    }

    /// What an update running at `now` sees of the value `id`.
    fn live(&self, id: ValueId, now: Millis) -> ValueId {
        match self.expires_at(id) {
            Some(expires_at) if now < expires_at => id,
            _ => ABSENT,
        }
    }
}

/// One operation, on the partition's key indices.
pub(crate) enum Step {
    /// An update at `now`: the live values it saw, and the values it stored
    /// (keys it kept are left out).
    Update { seen: Vec<(usize, ValueId)>, stored: Vec<(usize, ValueId)>, now: Millis },
    /// A read: the values it answered.
    Read { got: Vec<(usize, ValueId)> },
    /// An operation that no state allows (a write count that is not one per
    /// key): the history is not one of a store that keeps the contract.
    Impossible,
}

/// The model of one partition: its keys' values and its operations' steps.
pub(crate) struct Model {
    values: Values,
    steps: Vec<Step>,
}

impl Model {
    /// Compiles `operations`, whose keys are all in `keys`.
    pub(crate) fn new(keys: &[&str], operations: &[&Operation]) -> Self {
        let index: HashMap<&str, usize> = keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        let mut values = Values::default();
        let steps = operations.iter().map(|op| compile(&mut values, &index, op)).collect();
        Model { values, steps }
    }

    /// The state before the history: every key absent (a history checks
    /// fresh keys).
    pub(crate) fn initial(&self, keys: usize) -> State {
        vec![ABSENT; keys]
    }

    /// Runs operation `op` on `state`: false (and `state` unchanged) when what
    /// it saw or answered is not what the state holds.
    pub(crate) fn step(&self, op: usize, state: &mut State) -> bool {
        match &self.steps[op] {
            Step::Update { seen, stored, now } => {
                if seen.iter().any(|(k, v)| self.values.live(state[*k], *now) != *v) {
                    return false;
                }
                for (k, v) in stored {
                    state[*k] = *v;
                }
                true
            }
            Step::Read { got } => got.iter().all(|(k, v)| state[*k] == *v),
            Step::Impossible => false,
        }
    }
}

fn compile(values: &mut Values, index: &HashMap<&str, usize>, op: &Operation) -> Step {
    let keys: Vec<usize> = op.keys.iter().map(|k| index[k.as_str()]).collect();
    match &op.call {
        Call::Read { got } if got.len() == keys.len() => {
            Step::Read { got: keys.iter().zip(got).map(|(k, e)| (*k, values.intern(e))).collect() }
        }
        Call::Update { seen, wrote, now } if seen.len() == keys.len() && wrote.len() == keys.len() => {
            let seen = keys.iter().zip(seen).map(|(k, e)| (*k, values.intern(e))).collect();
            let stored = keys
                .iter()
                .zip(wrote)
                .filter_map(|(k, w)| match w {
                    Write::Keep => None,
                    Write::Delete => Some((*k, ABSENT)),
                    // An entry already expired is a delete.
                    Write::Put(e) if e.expires_at <= *now => Some((*k, ABSENT)),
                    Write::Put(e) => Some((*k, values.intern(&Some(e.clone())))),
                })
                .collect();
            Step::Update { seen, stored, now: *now }
        }
        _ => Step::Impossible,
    }
}
