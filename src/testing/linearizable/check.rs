//! The check: split a history into independent partitions (operations
//! connected by a shared key), then search each for a linearization, Wing &
//! Gong's search with Lowe's memo, as Porcupine runs it.

use std::collections::{HashMap, HashSet};
use std::fmt;

use super::history::{Call, Operation};
use super::model::{Model, State};

/// A history with no linearization: the keys of the partition that has none,
/// and its operations, for the report.
#[derive(Clone, Debug, PartialEq)]
pub struct NotLinearizable {
    /// The keys the partition's operations touch.
    pub keys: Vec<String>,
    /// The partition's operations, by invoke time.
    pub operations: Vec<Operation>,
    /// The most operations that could be put in one order that the model
    /// allows and their times respect, before the search ran out.
    pub longest_prefix: usize,
}

impl fmt::Display for NotLinearizable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 40;
        writeln!(
            f,
            "no linearization of {} operations on keys {:?} (at most {} of them fit one order); the first {}:",
            self.operations.len(),
            self.keys,
            self.longest_prefix,
            SHOWN.min(self.operations.len()),
        )?;
        for op in self.operations.iter().take(SHOWN) {
            let (what, entries) = match &op.call {
                Call::Update { seen, wrote, now } => ("update", format!("saw {seen:?} wrote {wrote:?} at {now}")),
                Call::Read { got } => ("read", format!("got {got:?}")),
            };
            let (from, to) = (op.invoked / 1000, op.returned / 1000);
            writeln!(f, "  [{from} µs, {to} µs] {what} {:?}: {entries}", op.keys)?;
        }
        Ok(())
    }
}

impl std::error::Error for NotLinearizable {}

/// Checks that `operations` are linearizable against the store contract's
/// sequential model, every key absent at first: that there is one order of
/// them, respecting each call's invoke and return times, in which each update
/// saw the live entries the ones before it left (on its own clock) and each
/// read answered them.
///
/// The history is split by key: operations that share no key, directly or
/// through others, are checked apart, which keeps the search small. Entries
/// must outlive the history for reads (a read has no clock to judge expiry
/// on); updates judge expiry on the clock their `apply` was given.
pub fn check(operations: &[Operation]) -> Result<(), NotLinearizable> {
    for (keys, ops) in partitions(operations) {
        let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let model = Model::new(&key_refs, &ops);
        if let Err(longest_prefix) = search(&model, &ops, model.initial(keys.len())) {
            let mut operations: Vec<Operation> = ops.into_iter().cloned().collect();
            operations.sort_by_key(|op| op.invoked);
            return Err(NotLinearizable { keys, operations, longest_prefix });
        }
    }
    Ok(())
}

/// The operations, grouped by the connected sets of keys they touch.
fn partitions(operations: &[Operation]) -> Vec<(Vec<String>, Vec<&Operation>)> {
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut ids: HashMap<&str, usize> = HashMap::new();
    let mut parent: Vec<usize> = Vec::new();
    for op in operations {
        let mut first = None;
        for key in &op.keys {
            let id = *ids.entry(key).or_insert_with(|| {
                parent.push(parent.len());
                parent.len() - 1
            });
            match first {
                None => first = Some(id),
                Some(f) => {
                    let (a, b) = (root(&mut parent, f), root(&mut parent, id));
                    parent[a] = b;
                }
            }
        }
    }
    let mut groups: HashMap<usize, (Vec<String>, Vec<&Operation>)> = HashMap::new();
    for (key, id) in &ids {
        groups.entry(root(&mut parent, *id)).or_default().0.push((*key).to_owned());
    }
    for op in operations {
        if let Some(key) = op.keys.first() {
            let group = root(&mut parent, ids[key.as_str()]);
            groups.get_mut(&group).expect("a group per root").1.push(op);
        }
    }
    let mut out: Vec<_> = groups.into_values().collect();
    for (keys, _) in &mut out {
        keys.sort_unstable();
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// One call or return event in the search's doubly linked list.
struct Event {
    op: usize,
    is_call: bool,
    /// For a call, the index of its return event.
    matching: usize,
    prev: usize,
    next: usize,
}

const HEAD: usize = 0;

/// Wing & Gong's search: linearize the first call it can, depth first; on a
/// return whose call is not yet placed, undo the last placement and try the
/// next. Lowe's memo skips any (placed set, state) already explored. Answers
/// the longest prefix placed when there is no linearization.
fn search(model: &Model, ops: &[&Operation], mut state: State) -> Result<(), usize> {
    let mut times: Vec<(u64, bool, usize)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        // A return sorts after a call at the same instant: the two overlap.
        times.push((op.invoked, false, i));
        times.push((op.returned.max(op.invoked), true, i));
    }
    times.sort_unstable();
    let mut events = vec![Event { op: usize::MAX, is_call: false, matching: 0, prev: HEAD, next: 1 }];
    let mut return_of = vec![0; ops.len()];
    for (n, (_, is_return, op)) in times.iter().enumerate() {
        let at = n + 1;
        events.push(Event { op: *op, is_call: !is_return, matching: 0, prev: at - 1, next: at + 1 });
        if *is_return {
            return_of[*op] = at;
        }
    }
    let end = events.len();
    events.last_mut().expect("the head at least").next = end;
    for event in events.iter_mut().skip(1) {
        if event.is_call {
            event.matching = return_of[event.op];
        }
    }

    let words = ops.len().div_ceil(64);
    let mut placed = vec![0u64; words];
    let mut seen: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut stack: Vec<(usize, State)> = Vec::new();
    let mut longest = 0;
    let mut at = events[HEAD].next;
    while events[HEAD].next != end {
        if at == end {
            // Every call left was tried: nothing fits.
            return Err(longest);
        }
        let event = &events[at];
        if event.is_call {
            let op = event.op;
            let mut next_state = state.clone();
            if model.step(op, &mut next_state) {
                placed[op / 64] |= 1 << (op % 64);
                if seen.insert((placed.clone(), next_state.clone())) {
                    stack.push((at, std::mem::replace(&mut state, next_state)));
                    longest = longest.max(stack.len());
                    lift(&mut events, at);
                    at = events[HEAD].next;
                    continue;
                }
                placed[op / 64] &= !(1 << (op % 64));
            }
            at = events[at].next;
        } else {
            // A call returned before it could be placed: undo the last placement.
            let Some((call, before)) = stack.pop() else { return Err(longest) };
            state = before;
            let op = events[call].op;
            placed[op / 64] &= !(1 << (op % 64));
            unlift(&mut events, call);
            at = events[call].next;
        }
    }
    Ok(())
}

/// Takes a call and its return out of the list.
fn lift(events: &mut [Event], call: usize) {
    for at in [call, events[call].matching] {
        let (prev, next) = (events[at].prev, events[at].next);
        events[prev].next = next;
        if next < events.len() {
            events[next].prev = prev;
        }
    }
}

/// Puts back a call and its return, in the reverse order of [`lift`].
fn unlift(events: &mut [Event], call: usize) {
    for at in [events[call].matching, call] {
        let (prev, next) = (events[at].prev, events[at].next);
        events[prev].next = at;
        if next < events.len() {
            events[next].prev = at;
        }
    }
}
