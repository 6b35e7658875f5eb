//! The Redis store's [integer counts](crate::IntegerCounts), on one server
//! (or Sentinel's primary): a one-part GCRA's count is one short script on
//! the key's integer (`call.rs`), where a count through `update` reads,
//! checks and writes JSON by compare-and-set. The script reads and writes in
//! one step, so a count never misses and never retries: no guess, no claim,
//! no lock of this instance's own.
//!
//! - **The entry** is the one `update` leaves (`"<tat>|<interval>"`), so a
//!   key may be counted either way, read, reset and swept as any other.
//! - **The bound**: a count of a key this instance has not seen live holds
//!   room for one new entry in its family before it is sent, and the script
//!   adds a key only with that room; a key that was there gives it back.
//! - **What the script leaves**, the compare-and-set counts (a key counted
//!   at another interval, a value that is no such integer), through
//!   `update` with the same rule in Rust.
//!
//! On a cluster the store offers no integer counts: there a count's keys
//! are named by slot and routed as `batch.rs` does, and it goes by `update`.

mod call;

use std::future::Future;
use std::pin::Pin;

use super::entry::Raw;
use super::family::{FamilyAdmission, Tag};
use super::RedisStore;
use crate::bound::{FamilyId, Short};
use crate::key_hash::KeyHash;
use crate::rules::check_keys;
use crate::{AsyncIntegerCounter, Entry, GcraCounted, GcraStep, IntegerCounts, Millis, StoreError, Write};

pub(super) use call::IntegerCalls;
use call::{Counted, EXACT};

/// True when `store` offers integer counts: on one server (or Sentinel's
/// primary), with a grace the script adds exactly in Lua's doubles (a TAT's
/// expiry is the TAT plus the grace).
pub(super) fn offered(store: &RedisStore) -> bool {
    !store.shared.cluster && store.shared.grace <= EXACT
}

impl IntegerCounts for RedisStore {
    fn async_counter(&self, prefix: &str) -> Option<Box<dyn AsyncIntegerCounter>> {
        let shared = &self.shared;
        let (family, tag) = shared.families.of(shared.bound.counts(), &shared.secret, prefix);
        Some(Box::new(Counter { store: self.clone(), prefix: prefix.to_owned(), family, tag }))
    }
}

/// Counts the keys after one prefix, of one family.
struct Counter {
    store: RedisStore,
    prefix: String,
    family: FamilyId,
    tag: Tag,
}

impl AsyncIntegerCounter for Counter {
    fn count<'a>(
        &'a self,
        rest: &'a str,
        step: GcraStep,
    ) -> Pin<Box<dyn Future<Output = Result<GcraCounted, StoreError>> + Send + 'a>> {
        Box::pin(self.count_key(rest, step))
    }
}

impl Counter {
    async fn count_key(&self, rest: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        let mut key = String::with_capacity(self.prefix.len() + rest.len());
        key.push_str(&self.prefix);
        key.push_str(rest);
        check_keys(&[&key])?;
        let exact = step.interval() <= EXACT
            && step.capacity() <= EXACT
            && step.interval().saturating_mul(i64::try_from(step.cost()).unwrap_or(i64::MAX)) <= EXACT;
        if !exact {
            return self.store.count_by_update(&key, step).await;
        }
        let shared = &*self.store.shared;
        let hash = shared.secret.key_hash(&key);
        let mut admission = FamilyAdmission::new(shared.bound.counts(), &shared.families);
        // Room for a new key is held for a key this instance has not seen
        // live, as the compare-and-set guesses (`count.rs`); one that was
        // there gives it back, and one seen that is gone after all is sent
        // again with room.
        let mut room = match self.seen_live(&hash) {
            true => Err(None),
            false => admission.hold(vec![self.family], Vec::new()).map_err(Some),
        };
        loop {
            let name = self.store.name(self.tag, &hash);
            let (counted, added) = match shared.integers.count(name, step, room.is_ok()).await? {
                Counted::Done { counted, added } => (counted, added),
                Counted::Full => match room {
                    Err(None) => {
                        room = admission.hold(vec![self.family], Vec::new()).map_err(Some);
                        if room.is_ok() {
                            continue;
                        }
                        return Err(self.refused_for_room(room));
                    }
                    room => return Err(self.refused_for_room(room)),
                },
                Counted::ByUpdate => {
                    drop(admission);
                    return self.store.count_by_update(&key, step).await;
                }
            };
            if added {
                admission.commit();
            }
            shared.clock.reading(counted.now);
            self.remember(&hash, step, counted);
            shared.trips.note(1);
            self.store.refresh_bound_if_due();
            return Ok(counted);
        }
    }

    /// True when this instance last saw the key of `hash` live (Redis still
    /// holds it): it counts without room for a new key.
    fn seen_live(&self, hash: &KeyHash) -> bool {
        let shared = &self.store.shared;
        let Some(raw) = shared.last_seen.get(hash) else { return false };
        let expiry = raw.as_bytes().split(|&b| b == b'|').next();
        let expiry = expiry.and_then(|e| std::str::from_utf8(e).ok()?.parse::<Millis>().ok());
        match (expiry, shared.clock.estimate()) {
            (Some(expiry), Some(now)) => expiry.saturating_add(shared.grace) > now,
            _ => false,
        }
    }

    /// Remembers what the count left on the key, as the compare-and-set
    /// does: the TAT it wrote, or, refused, the live TAT the key holds.
    fn remember(&self, hash: &KeyHash, step: GcraStep, counted: GcraCounted) {
        let tat = match counted.allowed && step.cost() > 0 {
            true => counted.tat + step.interval() * i64::try_from(step.cost()).unwrap_or(i64::MAX),
            false if !counted.allowed && counted.tat > counted.now => counted.tat,
            false => return,
        };
        let raw = Raw::from_bytes(format!("{tat}|{}", step.interval()).into_bytes());
        self.store.shared.last_seen.set(hash, Some(raw));
    }

    /// The answer of a new key the bound has no room for.
    fn refused_for_room(&self, room: Result<(), Option<Short>>) -> StoreError {
        self.store.refresh_bound_if_due();
        match room {
            Err(Some(short)) => self.store.full(short),
            _ => self.store.full(Short::Bound),
        }
    }
}

impl RedisStore {
    /// `step` counted on `key` through [`update`](crate::LimitStore::update):
    /// the same rule, run in Rust on the entry read as integers.
    async fn count_by_update(&self, key: &str, step: GcraStep) -> Result<GcraCounted, StoreError> {
        let mut counted = None;
        let mut apply = |current: &[Option<Entry>], now| {
            let stored = current[0].as_ref().and_then(|e| Some((e.value.as_i64()?, e.expires_at)));
            let (kept, answer) = step.run(stored, now);
            counted = Some(answer);
            vec![match kept {
                Some((value, expires_at)) => Write::Put(Entry { value: value.into(), expires_at }),
                None => Write::Keep,
            }]
        };
        self.count(&[key], &mut apply).await?;
        counted.ok_or_else(crate::store::no_apply_run)
    }
}
