//! A store of the contract made to break one rule on purpose ([`Defect`]),
//! or none: what `contract_catches_broken.rs` runs the suite against.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use limit_store::clock::{Clock, SystemClock};
use limit_store::rules::{check_keys, run_apply};
use limit_store::testing::StorePair;
use limit_store::{
    Apply, AsyncIntegerCounter, Entry, GcraCounted, GcraStep, IntegerCounts, LimitStore, Millis, StoreError, Write,
};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Defect {
    None,
    /// Reads, lets others run, then writes: a read-modify-write that isn't atomic.
    LostUpdate,
    /// Atomic for keys it holds, racy when it creates a key.
    RacyFirstUpdate,
    /// Writes the keys of one update one at a time, letting others in between.
    TornMultiKey,
    /// Hands out entries past their expiry.
    IgnoresExpiry,
    /// Takes values of any size.
    AcceptsOversizedValues,
    /// Takes more than 32 keys.
    AcceptsTooManyKeys,
    /// Takes the same key twice.
    AcceptsDuplicateKeys,
    /// Takes keys of any length.
    AcceptsLongKeys,
    /// Refuses keys that the contract allows (over 512 bytes).
    RefusesLongAllowedKeys,
    /// Writes what `apply` returned even when it was the wrong number of writes.
    PartialWriteOnBadAnswer,
    /// `sweep` removes every entry.
    SweepRemovesLive,
    /// `sweep` always answers 0.
    SweepCountsNothing,
    /// `sweep` answers how many entries expired, and removes none.
    SweepDeletesNothing,
    /// Optimistic: reads, runs `apply` unlocked, then writes if the value is
    /// still "equal" under a collation that folds case and accents (as
    /// MariaDB's default one did).
    ComparesFolded,
    /// Each handle has its own entries, though it says it is shared.
    HandlesDontShare,
    /// `read` answers keys in reverse.
    ReadsOutOfOrder,
    /// The second handle's clock runs ten minutes ahead.
    SecondClockAhead,
    /// The second handle's clock runs ten minutes behind.
    SecondClockBehind,
    /// Calls `apply` under a std lock without catching a panic: the lock poisons.
    PoisonedByPanic,
    /// `Keep` drops the entry.
    KeepDeletes,
    /// `Delete` does nothing.
    DeleteIgnored,
    /// Stores numbers as f64.
    LossyNumbers,
    /// Its integer counter reads, lets others run, then writes.
    RacyIntegers,
    /// Its integer counter keeps the TAT as the value: not what `update` reads.
    IntegersKeptAsTat,
}

pub(crate) struct Naive {
    entries: Arc<Mutex<HashMap<String, Entry>>>,
    clock_offset: Millis,
    defect: Defect,
}

impl Naive {
    pub(crate) fn pair(defect: Defect) -> StorePair {
        let entries = Arc::new(Mutex::new(HashMap::new()));
        let second_entries = if defect == Defect::HandlesDontShare { Arc::default() } else { entries.clone() };
        let offset = match defect {
            Defect::SecondClockAhead => 600_000,
            Defect::SecondClockBehind => -600_000,
            _ => 0,
        };
        StorePair {
            first: Arc::new(Naive { entries, clock_offset: 0, defect }),
            second: Arc::new(Naive { entries: second_entries, clock_offset: offset, defect }),
        }
    }

    fn now(&self) -> Millis {
        SystemClock.now() + self.clock_offset
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        if self.defect == Defect::PoisonedByPanic {
            self.entries.lock().expect("a poisoned lock")
        } else {
            self.entries.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }

    fn check(&self, keys: &[&str]) -> Result<(), StoreError> {
        let ok = match self.defect {
            Defect::AcceptsTooManyKeys => keys.len() > 32,
            Defect::AcceptsDuplicateKeys => {
                keys.len() > 1 && keys.iter().all(|k| keys.iter().filter(|o| *o == k).count() <= 2)
            }
            Defect::AcceptsLongKeys => keys.iter().all(|k| !k.is_empty()),
            _ => false,
        };
        if ok && !keys.is_empty() {
            return Ok(());
        }
        if self.defect == Defect::RefusesLongAllowedKeys && keys.iter().any(|k| k.len() > 512) {
            return Err(limit_store::error::RefusedInput::KeyTooLong { index: 0, len: 513 }.into());
        }
        check_keys(keys)
    }

    fn current(&self, map: &HashMap<String, Entry>, keys: &[&str], now: Millis) -> Vec<Option<Entry>> {
        keys.iter()
            .map(|k| map.get(*k).filter(|e| self.defect == Defect::IgnoresExpiry || e.expires_at > now).cloned())
            .collect()
    }

    fn apply(&self, apply: &mut Apply<'_>, current: &[Option<Entry>], now: Millis) -> Result<Vec<Write>, StoreError> {
        match self.defect {
            Defect::PoisonedByPanic => Ok(apply(current, now)),
            Defect::AcceptsOversizedValues => Ok(apply(current, now)),
            Defect::PartialWriteOnBadAnswer => {
                let writes = apply(current, now);
                if writes.len() != current.len() {
                    return Ok(writes); // written below, then the error comes too late
                }
                run_apply(&mut |_: &[Option<Entry>], _: Millis| writes.clone(), current, now)
            }
            _ => run_apply(apply, current, now),
        }
    }

    fn write(&self, map: &mut HashMap<String, Entry>, key: &str, write: Write) {
        match write {
            Write::Put(mut entry) => {
                if self.defect == Defect::LossyNumbers {
                    entry.value = lossy(entry.value);
                }
                map.insert(key.to_owned(), entry);
            }
            Write::Keep if self.defect == Defect::KeepDeletes => {
                map.remove(key);
            }
            Write::Keep => {}
            Write::Delete if self.defect == Defect::DeleteIgnored => {}
            Write::Delete => {
                map.remove(key);
            }
        }
    }
}

/// An entry as a case- and accent-insensitive collation sees it.
fn folded(entry: &Option<Entry>) -> Option<String> {
    entry.as_ref().map(|e| e.value.to_string().to_lowercase().replace('é', "e"))
}

fn lossy(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => n.as_f64().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.into_iter().map(lossy).collect()),
        Value::Object(o) => Value::Object(o.into_iter().map(|(k, v)| (k, lossy(v))).collect()),
        other => other,
    }
}

#[async_trait::async_trait]
impl LimitStore for Naive {
    fn shared(&self) -> bool {
        true
    }

    fn integer_counts(&self) -> Option<&dyn IntegerCounts> {
        Some(self)
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.check(keys)?;
        let now = self.now();
        let racy = match self.defect {
            Defect::LostUpdate | Defect::TornMultiKey | Defect::ComparesFolded => true,
            Defect::RacyFirstUpdate => keys.iter().any(|k| !self.lock().contains_key(*k)),
            _ => false,
        };
        if !racy {
            let mut map = self.lock();
            let current = self.current(&map, keys, now);
            let writes = self.apply(apply, &current, now)?;
            let wrong = writes.len() != keys.len();
            for (key, write) in keys.iter().zip(writes) {
                self.write(&mut map, key, write);
            }
            if wrong {
                return Err(limit_store::error::RefusedInput::WrongWriteCount { keys: keys.len(), writes: 0 }.into());
            }
            return Ok(());
        }
        let current = self.current(&self.lock(), keys, now);
        tokio::task::yield_now().await;
        let mut writes = self.apply(apply, &current, now)?;
        if self.defect == Defect::ComparesFolded {
            // Compare-and-set, folding case and accents; run apply again on a miss.
            let mut map = self.lock();
            let mut seen = current;
            loop {
                let now_there = self.current(&map, keys, now);
                if now_there.iter().map(folded).eq(seen.iter().map(folded)) {
                    for (key, write) in keys.iter().zip(writes) {
                        self.write(&mut map, key, write);
                    }
                    return Ok(());
                }
                seen = now_there;
                writes = self.apply(apply, &seen, now)?;
            }
        }
        for (key, write) in keys.iter().zip(writes) {
            self.write(&mut self.lock(), key, write);
            if self.defect == Defect::TornMultiKey {
                tokio::task::yield_now().await;
            }
        }
        Ok(())
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.check(keys)?;
        let mut got = self.current(&self.lock(), keys, self.now());
        if self.defect == Defect::ReadsOutOfOrder {
            got.reverse();
        }
        Ok(got)
    }

    async fn sweep(&self) -> Result<u64, StoreError> {
        let now = self.now();
        let mut map = self.lock();
        let before = map.len();
        if self.defect == Defect::SweepRemovesLive {
            map.clear();
        } else if self.defect == Defect::SweepDeletesNothing {
        } else {
            map.retain(|_, e| e.expires_at > now);
        }
        let removed = (before - map.len()) as u64;
        if self.defect == Defect::SweepDeletesNothing {
            let expired = map.values().filter(|e| e.expires_at <= now).count() as u64;
            return Ok(expired);
        }
        Ok(if self.defect == Defect::SweepCountsNothing { 0 } else { removed })
    }
}

/// Naive's integer counts: the rule of `GcraStep::run` on the key's entry,
/// under the map's lock, leaving the entry `update` would.
impl IntegerCounts for Naive {
    fn async_counter(&self, prefix: &str) -> Option<Box<dyn AsyncIntegerCounter>> {
        let store = Naive { entries: self.entries.clone(), clock_offset: self.clock_offset, defect: self.defect };
        Some(Box::new(NaiveCounter { store, prefix: prefix.to_owned() }))
    }
}

struct NaiveCounter {
    store: Naive,
    prefix: String,
}

type Counting<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>>;

impl AsyncIntegerCounter for NaiveCounter {
    fn count<'a>(&'a self, rest: &'a str, step: GcraStep) -> Counting<'a> {
        Box::pin(async move {
            let (store, key, now) = (&self.store, format!("{}{rest}", self.prefix), self.store.now());
            let held = |map: &HashMap<String, Entry>| {
                store.current(map, &[key.as_str()], now)[0]
                    .as_ref()
                    .and_then(|e| Some((e.value.as_i64()?, e.expires_at)))
            };
            let write = |map: &mut HashMap<String, Entry>, stored| {
                let (kept, counted) = step.run(stored, now);
                if let Some((interval, tat)) = kept {
                    let value = if store.defect == Defect::IntegersKeptAsTat { tat } else { interval };
                    map.insert(key.clone(), Entry { value: value.into(), expires_at: tat });
                }
                counted
            };
            if store.defect == Defect::RacyIntegers {
                let stored = held(&store.lock());
                tokio::task::yield_now().await;
                return Ok(write(&mut store.lock(), stored));
            }
            let mut map = store.lock();
            let stored = held(&map);
            Ok(write(&mut map, stored))
        })
    }
}
