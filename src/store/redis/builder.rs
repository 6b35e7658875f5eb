//! `RedisStoreBuilder`: the settings of a Redis store, and connecting.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use super::batch::Batcher;
use super::cluster::steps::StepBatcher;
use super::link::{Link, WAITING_CONNS};
use super::script::Scripts;
use super::server::ServerInfo;
use super::upkeep::{self, SWEEP_EVERY};
use super::{RedisStore, Shared, DEFAULT_GRACE, DEFAULT_MAX_ENTRIES, DEFAULT_PREFIX, DEFAULT_REMEMBER};
use crate::bound::SharedBound;
use crate::key_hash::Secret;
use crate::last_seen::LastSeen;
use crate::secret::redact;
use crate::server_clock::ServerClock;
use crate::{SecretString, StoreError};

/// Lock stripes for an instance's own counts (see `Shared::stripes`).
pub(super) const STRIPES: usize = 1_024;

/// Settings of a [`RedisStore`]; [`RedisStoreBuilder::connect`] makes it.
#[derive(Clone)]
pub struct RedisStoreBuilder {
    url: String,
    secret: Option<SecretString>,
    prefix: String,
    max_entries: u64,
    remember: usize,
    sweep_every: Option<Duration>,
    grace: Duration,
    min_replicas_acked: u32,
}

impl std::fmt::Debug for RedisStoreBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStoreBuilder")
            .field("url", &redact(&self.url))
            .field("secret", &self.secret)
            .field("prefix", &self.prefix)
            .field("max_entries", &self.max_entries)
            .field("remember", &self.remember)
            .field("sweep_every", &self.sweep_every)
            .field("grace", &self.grace)
            .field("min_replicas_acked", &self.min_replicas_acked)
            .finish()
    }
}

impl RedisStoreBuilder {
    pub(super) fn new(url: &str) -> Self {
        RedisStoreBuilder {
            url: url.to_owned(),
            secret: None,
            prefix: DEFAULT_PREFIX.to_owned(),
            max_entries: DEFAULT_MAX_ENTRIES,
            remember: DEFAULT_REMEMBER,
            sweep_every: Some(SWEEP_EVERY),
            grace: DEFAULT_GRACE,
            min_replicas_acked: 0,
        }
    }

    /// The site secret keys are hashed under (at least 32 bytes). Required.
    pub fn secret(mut self, secret: &str) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// What every key starts with, before the secret's generation (default
    /// `limit-store`): to keep two sites apart on one server.
    pub fn prefix(mut self, prefix: &str) -> Self {
        prefix.clone_into(&mut self.prefix);
        self
    }

    /// The bound on live entries of this generation (default 1,000,000).
    pub fn max_entries(mut self, max_entries: u64) -> Self {
        self.max_entries = max_entries;
        self
    }

    /// How many keys' last entries to remember, to count them in one round
    /// trip (default 100,000). A key not remembered is guessed to hold
    /// nothing, which a new key usually doesn't. 0 turns guessing off: every
    /// update reads, then writes.
    pub fn remember(mut self, n: usize) -> Self {
        self.remember = n;
        self
    }

    /// How often to sweep: remove the expired entries Redis still holds in
    /// their grace, and count the entries again for the bound (default every
    /// 5 minutes; `None`: never, but for a count at start and near the bound).
    pub fn sweep_every(mut self, every: Option<Duration>) -> Self {
        self.sweep_every = every;
        self
    }

    /// How long after its expiry Redis drops an entry (default 5 s). In the
    /// grace the entry is already dead to reads and counts, and `sweep`
    /// removes it and says so; with `Duration::ZERO` Redis drops it at its
    /// expiry and `sweep` finds nothing to remove (it answers 0).
    pub fn expiry_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How many replicas must acknowledge a count (Redis `WAIT`, up to 1 s)
    /// before it is answered (default 0: none). Redis replicates after it
    /// answers, so a failover can lose counts the old primary acknowledged;
    /// with 1 or more, a count no replica has is answered unavailable
    /// instead (it may still be on the primary), and an acknowledged count
    /// survives the failover of its primary. Costs a replica's round trip
    /// per batch of counts. The counts that wait go on eight connections of
    /// their own (to one server or Sentinel's primary, or on a cluster to
    /// every primary), so that one `WAIT` holds up neither the others nor
    /// reads.
    pub fn min_replicas_acked(mut self, n: u32) -> Self {
        self.min_replicas_acked = n;
        self
    }

    /// Connects, and checks the server (Redis 6.2 or later, or Valkey; a
    /// Cluster only through `redis+cluster://`) and its eviction policy (on a
    /// cluster, every primary's). This generation's entries are
    /// counted for the bound right after, in the background.
    pub async fn connect(self) -> Result<RedisStore, StoreError> {
        let url = redact(&self.url);
        let secret = match &self.secret {
            Some(secret) => Secret::new(secret.expose())?,
            None => {
                return Err(StoreError::setup(
                    "the Redis store needs the site secret: set LIMIT_STORE_SECRET (or rate_limit.secret in \
                     limit-store.toml; in code, the builder's .secret()) to a random string of at least 32 bytes, \
                     as `openssl rand -base64 48` prints",
                ))
            }
        };
        if self.prefix.is_empty() || self.prefix.len() > 64 {
            return Err(StoreError::setup("the Redis key prefix must be 1 to 64 bytes"));
        }
        let waiting = if self.min_replicas_acked > 0 { WAITING_CONNS } else { 0 };
        let link = Link::connect(&self.url, &url, waiting).await?;
        let unreachable = |e: redis::RedisError| StoreError::Setup {
            detail: format!("can't reach Redis at {url}: check that it runs and that the URL is right"),
            source: Some(Box::new(e)),
        };
        let info = match link.cluster() {
            Some(mut cluster) => super::cluster::check_primaries(&mut cluster, &url).await?,
            None => {
                let info: String = redis::cmd("INFO").query_async(&mut link.conn()).await.map_err(unreachable)?;
                let info = ServerInfo::parse(&info);
                info.check(&url)?;
                info.warn_if_evicting(&url);
                info
            }
        };
        let link_is_cluster = link.cluster().is_some();
        let names = format!("{}:{:x}:", self.prefix, secret.generation());
        let claims = format!("{}:claim:{:x}:", self.prefix, secret.generation());
        // Claims lie outside the generation's keys, so that `SCAN` skips them.
        let batcher = Batcher::new(link.clone(), names.clone(), claims, self.min_replicas_acked);
        let steps = batcher.slot_map().map(|map| StepBatcher::new(link.clone(), map.clone()));
        let grace = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let integers = super::integer::IntegerCalls::new(link.clone(), grace, self.min_replicas_acked);
        let shared = Arc::new(Shared {
            batcher,
            integers,
            steps,
            link,
            scripts: Scripts::new(),
            names,
            token_base: random_u64(),
            tokens: AtomicU64::new(0),
            secret,
            // Counting is a SCAN over the server's keys: less often than a
            // database's index count.
            bound: SharedBound::new("redis", self.max_entries, 0)
                .refreshing_every(Duration::from_secs(60), Duration::from_secs(5)),
            families: super::family::FamilyTags::new(),
            clock: ServerClock::new(),
            last_seen: LastSeen::new(self.remember),
            guess_from_last_seen: self.remember > 0,
            cluster: link_is_cluster,
            trips: super::Trips::default(),
            server: info,
            upkeep: std::sync::OnceLock::new(),
            grace,
            stripes: (0..STRIPES).map(|_| tokio::sync::Mutex::new(())).collect(),
        });
        // The first count walks every key of the database: in the background,
        // so that connecting costs a few round trips however big it is.
        let _ = shared.upkeep.set(upkeep::spawn(Arc::downgrade(&shared), self.sweep_every));
        Ok(RedisStore { shared })
    }
}

/// A random number from the standard library's per-process hash keys.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher
        .write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    hasher.finish()
}
