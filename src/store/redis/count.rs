//! The store's calls: an update's compare-and-set loop, and a read.

use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::batch::WriteCall;
use super::entry::decode;
use super::family::{FamilyAdmission, Tag};
use super::write::ops;
use super::CALL_LIMIT;
use super::{failed, Op, Raw, RedisStore, Shared, Written, MAX_TRIES};
use crate::bound::{FamilyId, Short};
use crate::error::Unavailable;
use crate::key_hash::KeyHash;
use crate::rules::{check_keys, run_apply};
use crate::server_clock::{MAX_LAG_MS, MAX_LEAD_MS};
use crate::{Apply, Entry, LimitStore, Millis, OwnedApply, StoreError};

/// How long an update waits when another instance's update has claimed one
/// of its keys for its next try.
const CLAIM_WAIT: Duration = Duration::from_micros(300);

/// What an update's next `apply` runs on: the keys' raw entries and a clock.
struct Basis {
    held: Vec<Raw>,
    now: Millis,
    /// True when both came from the server in the last answer; false for a
    /// guess (remembered entries and the estimated clock).
    fresh: bool,
    /// True when they came from a read of the keys (on a cluster a script
    /// per slot, so keys of several slots at different instants); false
    /// from a write's answer (one script) or a guess.
    read: bool,
}

impl Shared {
    /// The keys' entries and the clock, read from the server.
    async fn read_basis(&self, names: &[String]) -> Result<Basis, StoreError> {
        let (now, held) = if self.cluster {
            // A script per slot; locks of updates across slots resolved.
            super::cluster::basis(self, names).await?
        } else {
            let read = self.scripts.read(&mut self.link.conn(), names).await;
            read.map_err(|e| {
                self.link.trouble(false, Some(&e));
                failed(e)
            })?
        };
        self.clock.reading(now);
        Ok(Basis { held, now, fresh: true, read: true })
    }

    /// The first basis of an update: a guess when the store guesses and the
    /// clock can be estimated.
    async fn first_basis(&self, hashes: &[KeyHash], names: impl FnOnce() -> Vec<String>) -> Result<Basis, StoreError> {
        match self.clock.estimate().filter(|_| self.guess_from_last_seen) {
            Some(now) => Ok(Basis {
                held: hashes.iter().map(|h| self.last_seen.get(h).unwrap_or_default()).collect(),
                now,
                fresh: false,
                read: false,
            }),
            None => self.read_basis(&names()).await,
        }
    }

    /// Locks the stripes of `hashes`, in order. A lock that is not had
    /// within [`CALL_LIMIT`] is gone without (a count whose future was leaked
    /// holds it forever): the compare-and-set keeps the count exact anyway.
    async fn lock(&self, hashes: &[KeyHash]) -> Vec<tokio::sync::MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> =
            hashes.iter().map(|h| usize::from(u16::from_le_bytes([h[0], h[1]])) % self.stripes.len()).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let mut guards = Vec::with_capacity(stripes.len());
        for stripe in stripes {
            match tokio::time::timeout(CALL_LIMIT, self.stripes[stripe].lock()).await {
                Ok(guard) => guards.push(guard),
                Err(_) => break,
            }
        }
        guards
    }

    /// A token no other update of any instance holds at the same time.
    pub(super) fn token(&self) -> u64 {
        self.token_base.wrapping_add(self.tokens.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    pub(super) fn remember(&self, hash: &KeyHash, raw: &Raw) {
        self.last_seen.set(hash, raw.is_some().then(|| raw.clone()));
    }

    /// Remembers what a written update left on each key: `held` where it
    /// kept the entry, nothing where it deleted, the new entry where it put.
    pub(super) fn remember_written(&self, hashes: &[KeyHash], ops: Vec<Op>, held: &[Raw]) {
        for ((hash, op), raw) in hashes.iter().zip(ops).zip(held) {
            match op {
                Op::Keep => self.remember(hash, raw),
                Op::Delete => self.last_seen.set(hash, None),
                Op::Put { raw, .. } => self.last_seen.set(hash, Some(raw)),
            }
        }
    }
}

impl RedisStore {
    pub(super) async fn count(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        check_keys(keys)?;
        let started = Instant::now();
        let shared = &*self.shared;
        let mut hashes: Vec<KeyHash> = keys.iter().map(|k| shared.secret.key_hash(k)).collect();
        let (families, mut tags): (Vec<FamilyId>, Vec<Tag>) =
            keys.iter().map(|k| shared.families.of(shared.bound.counts(), &shared.secret, k)).unzip();
        let token = shared.token();
        let _locks = shared.lock(&hashes).await;
        // Keys in several slots go by the cross-slot steps, unless one node
        // serves them all: then one compare-and-set there, as on one slot.
        let apart = shared.cluster && super::cluster::txn::spans_slots(&hashes);
        if apart && !shared.batcher.one_node(&hashes) {
            return super::cluster::txn::count(self, &hashes, &tags, &families, apply).await;
        }
        let mut basis = shared.first_basis(&hashes, || self.names(&tags, &hashes)).await?;
        let mut trips = u64::from(basis.fresh);
        let mut admission = FamilyAdmission::new(shared.bound.counts(), &shared.families);
        let mut missed = 0;
        while missed < MAX_TRIES {
            let entries = match decode(&basis.held, &hashes, basis.now) {
                Ok(entries) => entries,
                // A remembered entry is only a guess: ask the server. A lock
                // (of an update across slots) is resolved as the keys are read.
                Err(_) if !basis.fresh || basis.held.iter().any(super::cluster::is_lock) => {
                    basis = shared.read_basis(&self.names(&tags, &hashes)).await?;
                    trips += 1;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let writes = run_apply(apply, &entries, basis.now)?;
            let (ops, added, removed) = ops(writes, &basis.held, &families, shared.grace);
            // Read in one step and nothing to write: done, as a read. Keys of
            // several slots were read at different instants: the write of
            // nothing but `Keep` checks that view in one step.
            if basis.fresh && !(apart && basis.read) && ops.iter().all(|op| matches!(op, Op::Keep)) {
                shared.trips.note(trips);
                return Ok(());
            }
            if let Err(short) = admission.hold(added, removed) {
                self.refresh_bound_if_due();
                return Err(self.full(short));
            }
            let call = WriteCall {
                hashes,
                tags,
                expected: basis.held,
                ops,
                at: basis.now,
                lead: MAX_LEAD_MS,
                lag: (!basis.fresh).then_some(MAX_LAG_MS),
                token,
                claim: missed > 0,
            };
            let (call, answer) = shared.batcher.write(call).await?;
            hashes = call.hashes;
            tags = call.tags;
            trips += 1;
            let (now, held) = match answer? {
                Written::Done { now } => {
                    shared.clock.reading(now);
                    shared.remember_written(&hashes, call.ops, &call.expected);
                    admission.commit();
                    shared.trips.note(trips);
                    self.refresh_bound_if_due();
                    return Ok(());
                }
                Written::Changed { now, held } => {
                    missed += 1;
                    (now, held)
                }
                Written::Claimed { now, held } => {
                    // Another instance's update goes next: let it.
                    if started.elapsed() > CALL_LIMIT {
                        break;
                    }
                    tokio::time::sleep(CLAIM_WAIT).await;
                    (now, held)
                }
                Written::SlotsApart => {
                    drop(admission);
                    return super::cluster::txn::count(self, &hashes, &tags, &families, apply).await;
                }
            };
            shared.clock.reading(now);
            for (hash, raw) in hashes.iter().zip(&held) {
                shared.remember(hash, raw);
            }
            basis = Basis { held, now, fresh: true, read: false };
        }
        Err(StoreError::unavailable(
            Unavailable::StoreFailed,
            format!(
                "other instances kept changing these keys ({missed} tries) while this update ran; it wrote nothing"
            ),
        ))
    }

    /// The keys of the entries of `hashes`, tagged `tags`.
    fn names(&self, tags: &[Tag], hashes: &[KeyHash]) -> Vec<String> {
        tags.iter().zip(hashes).map(|(&tag, h)| self.name(tag, h)).collect()
    }

    /// The answer of a store at its bound, or of a family at its share,
    /// noted and logged. Names the family, never a key.
    #[cold]
    pub(super) fn full(&self, short: Short) -> StoreError {
        let bound = self.shared.bound.counts();
        bound.note_short("redis", short);
        let max = bound.max();
        let detail = match short {
            Short::Bound => format!("the store holds its bound of {max} entries and this update needs a new one"),
            Short::Share(family) => format!(
                "the keys of the family `{}` hold their share of the Redis store's bound of {max} entries (past 80% \
                 of it, a family adds new keys only while it holds no more than the room left)",
                bound.family_name(family)
            ),
        };
        StoreError::unavailable(Unavailable::Full, detail)
    }
}

#[async_trait]
impl LimitStore for RedisStore {
    fn shared(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<crate::StoreStats> {
        Some(self.shared.bound.stats())
    }

    /// On one server (or Sentinel's primary), with a grace the script takes:
    /// see `integer/`.
    fn integer_counts(&self) -> Option<&dyn crate::IntegerCounts> {
        super::integer::offered(self).then_some(self as &dyn crate::IntegerCounts)
    }

    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.count(keys, apply).await
    }

    /// The count itself, as [`update`](Self::update): the store keeps
    /// `apply` in the count's own future, so there is nothing to hand over,
    /// and no second boxed future through the trait's default.
    async fn update_owned(&self, keys: &[&str], mut apply: Box<OwnedApply>) -> Result<(), StoreError> {
        self.count(keys, &mut *apply).await
    }

    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        check_keys(keys)?;
        let shared = &*self.shared;
        let hashes: Vec<KeyHash> = keys.iter().map(|k| shared.secret.key_hash(k)).collect();
        let tags: Vec<Tag> =
            keys.iter().map(|k| shared.families.of(shared.bound.counts(), &shared.secret, k).1).collect();
        let names = self.names(&tags, &hashes);
        let (now, held) = if shared.cluster {
            // A snapshot across slots, locks of updates in flight seen through.
            super::cluster::snapshot(shared, &names).await?
        } else {
            let basis = shared.read_basis(&names).await?;
            (basis.now, basis.held)
        };
        for (hash, raw) in hashes.iter().zip(&held) {
            shared.remember(hash, raw);
        }
        decode(&held, &hashes, now)
    }

    /// Redis removes expired entries itself (`PXAT`), so there is nothing
    /// left to remove: answers 0, and counts this generation's live entries
    /// again for the bound.
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.shared.sweep().await
    }
}

#[cfg(test)]
pub(super) mod tests {
    use crate::{update_with, Entry, LimitStore, RedisStore, Write};

    /// Adds one with a minute to live from `now`; the `now` `apply` saw last.
    async fn count(store: &RedisStore) -> i64 {
        update_with(store, &["k"], |current, now| {
            let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
            (vec![Write::Put(Entry { value: n.into(), expires_at: now + 60_000 })], now)
        })
        .await
        .unwrap()
    }

    /// Adds one to `key`; the count it wrote.
    pub(in crate::store::redis) async fn add_one(store: &RedisStore, key: &str) -> u64 {
        update_with(store, &[key], |current, now| {
            let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
            (vec![Write::Put(Entry { value: n.into(), expires_at: now + 60_000 })], n)
        })
        .await
        .unwrap()
    }

    fn trips(store: &RedisStore) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        let t = &store.shared.trips;
        (t.one.load(Relaxed), t.two.load(Relaxed))
    }

    /// A guess made on a clock estimate outside [estimate - 2 ms, estimate +
    /// 50 ms] of Redis's clock writes nothing: the script answers the keys
    /// and `TIME`, and `apply` runs again on Redis's clock.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_guess_on_a_wrong_clock_estimate_writes_nothing() {
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS") else { return };
        let prefix = format!("lst-clock-{}", std::process::id());
        let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
        store.read(&["k"]).await.unwrap();
        count(&store).await;
        assert_eq!(trips(&store), (1, 0), "a fresh estimate: one round trip");
        store.shared.clock.shift(-10_000);
        let behind = count(&store).await;
        assert_eq!(trips(&store), (1, 1), "an estimate 10 s behind is refused");
        store.shared.clock.shift(10_000);
        let ahead = count(&store).await;
        assert_eq!(trips(&store), (1, 2), "an estimate 10 s ahead is refused");
        let last = count(&store).await;
        assert_eq!(trips(&store), (2, 2), "the estimate follows Redis's clock again");
        let server = store.read(&["k"]).await.unwrap()[0].clone().unwrap();
        assert_eq!(server.value, serde_json::json!(4), "every count landed once");
        for now in [behind, ahead, last] {
            assert!((server.expires_at - 60_000 - now).abs() < 5_000, "apply ran on Redis's clock: {now}");
        }
    }

    /// Counts ready at once go in one script call, and each is checked and
    /// written there on its own: the one whose key another instance changed
    /// misses and goes again, alone; the others in its call are written.
    #[tokio::test(flavor = "current_thread")]
    async fn a_miss_in_a_batch_leaves_the_others_written() {
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS") else { return };
        let prefix = format!("lst-batch-{}", std::process::id());
        let open = || RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect();
        let (store, other) = (open().await.unwrap(), open().await.unwrap());
        for key in ["a", "b", "c"] {
            assert_eq!(add_one(&store, key).await, 1);
        }
        assert_eq!(add_one(&other, "b").await, 2, "b changes behind the first store's back");
        let (batched, before) = (store.shared.batcher.batched(), trips(&store));
        let counted = tokio::join!(add_one(&store, "a"), add_one(&store, "b"), add_one(&store, "c"));
        assert_eq!(counted, (2, 3, 2), "every count landed once");
        assert_eq!(store.shared.batcher.batched() - batched, 3, "the three went in one call");
        let after = trips(&store);
        assert_eq!((after.0 - before.0, after.1 - before.1), (2, 1), "a and c in one round trip, b in two");
    }

    /// A two-key update whose second key holds no string (something else
    /// wrote it) fails, and its first key holds nothing of it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_key_holding_no_string_fails_the_update_whole() {
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS") else { return };
        let prefix = format!("lst-type-{}", std::process::id());
        let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
        // A clock to guess on: the update's first try is its write (`a`
        // and `b` were never seen), not a read, which would fail first.
        add_one(&store, "c").await;
        let shared = &store.shared;
        let name =
            store.name(shared.families.of(shared.bound.counts(), &shared.secret, "b").1, &shared.secret.key_hash("b"));
        let _: i64 =
            redis::cmd("HSET").arg(&name).arg("f").arg("v").query_async(&mut shared.link.conn()).await.unwrap();
        let answer = update_with(&store, &["a", "b"], |_, now| {
            let put = || Write::Put(Entry { value: 1.into(), expires_at: now + 60_000 });
            (vec![put(), put()], ())
        })
        .await;
        let _: i64 = redis::cmd("DEL").arg(&name).query_async(&mut shared.link.conn()).await.unwrap();
        assert!(answer.is_err(), "{answer:?}");
        assert_eq!(store.read(&["a"]).await.unwrap(), [None], "the other key holds nothing of it");
    }
}
