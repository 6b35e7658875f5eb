//! `RedisStore`: counts in Redis or Valkey, the store most sites with several
//! instances already run, exact across all of them.
//!
//! Built on the public contract as an app's own store would be:
//! - **Atomic read-modify-write with `apply` in Rust.** A count reads its keys
//!   and the server's `TIME` in one script, runs `apply`, and writes with a
//!   second script that checks every key still holds what `apply` saw (value
//!   and expiry, in one string) and sets them all, or changes nothing and
//!   answers what they hold now, so that `apply` runs again without another
//!   read. Contention is retried a bounded number of times, then answered
//!   unavailable: never a wrong count.
//! - **One round trip when the store can guess.** A key this instance saw
//!   last, or has never seen (a new key usually has no entry), is counted on
//!   that guess and an estimate of the server clock (`server_clock.rs`); the
//!   write script checks both, so a wrong guess costs the read it skipped.
//! - **Counts ready at once share one script call** (`batch.rs`), each
//!   checked and written on its own in it.
//! - **A one-part GCRA's count is one short script** on one server
//!   (`integer/`): the store's [integer counts](crate::IntegerCounts), with
//!   no `apply`, no guess and no retry.
//! - **The server's clock.** `now` is Redis's `TIME`; entries are written
//!   with `PXAT` at their expiry plus a short grace, so Redis drops them
//!   itself; reads and counts judge expiry by the stored expiry on Redis's
//!   clock, so an entry in its grace is already gone to them.
//! - **Keys** are HMAC-SHA-256 under the site secret, under a prefix with the
//!   secret's generation and the key's family tag (`family.rs`):
//!   `limit-store:<generation>:<tag>:<hmac>`.
//! - **The bound** is an estimate kept by counting this generation's keys
//!   (`SCAN`) in the background: at start, at every sweep (5 minutes), and
//!   when a count finds it due (every minute, every 5 s at 80% full), plus
//!   this instance's own adds; per family as well as in all, so that past
//!   80% full each family adds only within its share (`family.rs`).

mod batch;
mod builder;
mod cluster;
mod count;
pub(crate) mod entry;
mod family;
mod integer;
mod link;
mod replica;
mod script;
mod sentinel;
mod server;
mod turn;
mod upkeep;
mod write;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use self::batch::{Batcher, Op, Written};
use self::entry::Raw;
use self::family::{FamilyTags, Tag};
use self::script::Scripts;
use crate::bound::SharedBound;
use crate::error::Unavailable;
use crate::key_hash::KeyHash;
use crate::key_hash::Secret;
use crate::last_seen::LastSeen;
use crate::server_clock::ServerClock;
use crate::StoreError;

pub use self::builder::RedisStoreBuilder;

/// The longest one call to Redis may take: the server has no statement
/// timeout, so the client bounds it, under the guard's 2 s deadline.
const CALL_LIMIT: std::time::Duration = std::time::Duration::from_millis(1_500);
use self::server::ServerInfo;

/// The default bound of a Redis store.
pub(crate) const DEFAULT_MAX_ENTRIES: u64 = 1_000_000;
/// The default start of every key the store writes.
pub(crate) const DEFAULT_PREFIX: &str = "limit-store";
/// How many keys' last entries a store remembers by default, to count them
/// in one round trip.
pub(crate) const DEFAULT_REMEMBER: usize = 100_000;
/// How long after an entry's expiry Redis drops it by default: in the grace
/// the entry is dead to every read and count, and a sweep can remove it.
pub(crate) const DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
/// How many times an update tries its compare-and-set before it is answered
/// unavailable (other instances kept changing its keys).
pub(crate) const MAX_TRIES: usize = 32;

/// Counts in Redis or Valkey, shared by every instance that connects with the
/// same secret and prefix. Cheap to clone; clones share one connection.
/// `shared()` is true.
#[derive(Clone, Debug)]
pub struct RedisStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    link: Arc<link::Link>,
    scripts: Scripts,
    /// Sends the compare-and-sets, those ready at once together.
    batcher: Arc<Batcher>,
    /// Sends the integer counts, those ready at once together.
    integers: Arc<integer::IntegerCalls>,
    /// On a cluster, sends the steps of updates across slots, those ready at
    /// once for one node in one call (`cluster/steps.rs`).
    steps: Option<Arc<cluster::steps::StepBatcher>>,
    secret: Secret,
    /// `<prefix>:<generation>:`, what every key of this store starts with.
    names: String,
    /// Update tokens: a random start, and a count.
    token_base: u64,
    tokens: AtomicU64,
    bound: SharedBound,
    /// The families' tags, and what each wrote (see `family.rs`).
    families: FamilyTags,
    clock: ServerClock,
    last_seen: LastSeen<Raw>,
    /// False: every update reads before it writes (`remember(0)`).
    guess_from_last_seen: bool,
    /// On a Redis Cluster (see `cluster/`).
    cluster: bool,
    trips: Trips,
    /// What the server said of itself at connect.
    server: ServerInfo,
    /// Set once, right after the upkeep (sweeps, the bound's count) is spawned with a `Weak` of this.
    upkeep: std::sync::OnceLock<tokio::task::AbortHandle>,
    /// How long after its expiry Redis drops an entry, in ms.
    grace: i64,
    /// One lock per stripe of keys: an instance's own counts of a key wait
    /// for each other rather than fail each other's compare-and-set.
    stripes: Box<[tokio::sync::Mutex<()>]>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if let Some(upkeep) = self.upkeep.get() {
            upkeep.abort();
        }
    }
}

impl RedisStore {
    /// Starts building a store on `url`: `redis://` or `rediss://` (TLS),
    /// with a password and a database number as Redis URLs carry them; or
    /// `redis+sentinel://host:port,host:port,.../MASTER_NAME` (`rediss+sentinel://`),
    /// which asks Sentinel for the primary and follows its failovers; or
    /// `redis+cluster://host:port,host:port,...` (`rediss+cluster://`), a
    /// Redis or Valkey Cluster, where an update over keys in several hash
    /// slots stays atomic and exact.
    pub fn builder(url: &str) -> RedisStoreBuilder {
        RedisStoreBuilder::new(url)
    }

    /// What the store found when it connected (the server's eviction
    /// policy, this store's generation and key prefix), the round trips its
    /// updates took since, and its live entries, counted now with `SCAN`
    /// (one pass over the server's keys, in steps, on every primary of a
    /// cluster): for `stats`, not for requests.
    pub async fn info(&self) -> Result<RedisInfo, StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        let live_entries = self.shared.count_live().await?;
        let t = &self.shared.trips;
        Ok(RedisInfo {
            eviction_policy: self.shared.server.policy.clone(),
            evicts: self.shared.server.evicts(),
            generation: self.shared.secret.generation(),
            key_prefix: self.shared.names.clone(),
            live_entries,
            one_round_trip: t.one.load(Relaxed),
            two_round_trips: t.two.load(Relaxed),
            more_round_trips: t.more.load(Relaxed),
        })
    }

    /// The key of the entry of `hash`, of the family tagged `tag`.
    fn name(&self, tag: Tag, hash: &KeyHash) -> String {
        let names = &self.shared.names;
        let mut name = String::with_capacity(names.len() + 69);
        name.push_str(names);
        family::push_tag(&mut name, tag);
        cluster::push_hash(&mut name, hash, self.shared.cluster);
        name
    }
}

/// A [`RedisStore`]'s server and secret as it connected, its live entries,
/// and its round trips since, from [`RedisStore::info`]. The round trips
/// count updates by how many trips to the server each took: one (the guess
/// held, see [`RedisStoreBuilder::remember`]), two (read, then write; or a
/// guess that missed), or more (other instances changed the keys).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisInfo {
    /// The server's `maxmemory-policy` when the store connected; anything but
    /// `noeviction` may drop a lockout under memory pressure.
    pub eviction_policy: String,
    /// True when the server may evict entries: any policy but `noeviction`.
    pub evicts: bool,
    /// This store's secret generation.
    pub generation: i64,
    /// The prefix of every key of this store's generation.
    pub key_prefix: String,
    /// Live entries of this generation, counted by the call.
    pub live_entries: u64,
    /// Updates done in one round trip, since the store was made.
    pub one_round_trip: u64,
    /// Updates done in two.
    pub two_round_trips: u64,
    /// Updates that took three or more.
    pub more_round_trips: u64,
}

#[derive(Debug, Default)]
struct Trips {
    one: AtomicU64,
    two: AtomicU64,
    more: AtomicU64,
}

impl Trips {
    fn note(&self, trips: u64) {
        let slot = match trips {
            0 | 1 => &self.one,
            2 => &self.two,
            _ => &self.more,
        };
        slot.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A failed call to the server, answered unavailable; an `OOM` refusal, a
/// replica's `READONLY` and a timeout say so.
fn failed(e: redis::RedisError) -> StoreError {
    let (reason, detail) = if e.code() == Some("READONLY") {
        replica::noticed();
        (Unavailable::StoreFailed, replica::DETAIL)
    } else if e.code() == Some("OOM") {
        (Unavailable::StoreFailed, OOM)
    } else if e.is_timeout() {
        (Unavailable::Timeout, "Redis gave no answer in time")
    } else {
        (Unavailable::StoreFailed, "the call to Redis failed")
    };
    StoreError::Unavailable { reason, detail: detail.to_owned(), source: Some(Box::new(e)) }
}

const OOM: &str = "Redis refused the write for memory (OOM): raise maxmemory, or give the store an instance of its own";

/// An update's command that Redis refused in the write script (its error
/// text): nothing of the update was written. An `OOM` refusal says so.
fn refused(error: String) -> StoreError {
    let detail = if error.starts_with("READONLY") {
        replica::noticed();
        replica::DETAIL
    } else if error.starts_with("OOM") {
        OOM
    } else {
        "Redis refused the update's write"
    };
    StoreError::Unavailable { reason: Unavailable::StoreFailed, detail: detail.to_owned(), source: Some(error.into()) }
}
