//! Redis Cluster (or Valkey Cluster): `redis+cluster://host:port,host:port,...`
//! (`rediss+cluster://` with TLS), any of its nodes as seeds.
//!
//! - **Slots.** Each key's hash is its own hash tag, `{<hmac>}`, so a key and
//!   its claim and lock keys share a slot, and a limit's parts spread over
//!   the cluster as their hashes fall: nothing forces a limit into one slot.
//! - **One slot, one round trip.** An update whose keys all share a slot (every
//!   one-part limit) takes the path it takes on one server (`count.rs`,
//!   `batch.rs`): its compare-and-set runs in one script on the slot's
//!   primary, and counts ready at once whose slots one primary serves share
//!   a call to it (`slots.rs` keeps which primary serves each slot).
//! - **Several slots: a commit protocol** (`txn.rs`, argued in
//!   `PROTOCOL.md`): a lock with the intended value on every key, a commit
//!   point on one primary key, and readers that resolve a lock they meet
//!   (`resolve.rs`).
//! - **Redirects and failovers** (`MOVED`, `ASK`, a replica promoted) are
//!   followed by the `redis` crate's cluster client; an `ASK` it could not
//!   follow under load is followed once more here (`ask.rs`).
//! - **Every primary** is asked for `sweep`, the bound's count, `stats` and
//!   the eviction-policy check (`nodes.rs`).

pub(super) mod ask;
mod lock;
#[cfg(test)]
mod node_calls;
mod nodes;
mod read;
mod resolve;
mod scripts;
pub(super) mod slots;
pub(super) mod txn;

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

pub(super) use self::lock::is_lock;
pub(super) use self::nodes::{check_primaries, on, primaries, sweep};
pub(super) use self::read::read;
use crate::seen::KeyHash;
use crate::StoreError;

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16_384;

/// Parses a `redis+cluster://` or `rediss+cluster://` URL into its seed
/// nodes' URLs: `Some` for such a URL (or a clear error if malformed),
/// `None` for any other.
pub(super) fn seeds(url: &str) -> Option<Result<Vec<String>, StoreError>> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+cluster://") {
        ("redis", rest)
    } else if let Some(rest) = url.strip_prefix("rediss+cluster://") {
        ("rediss", rest)
    } else {
        return None;
    };
    let bad = || {
        StoreError::setup(
            "a Cluster URL is redis+cluster://[:password@]host:port,host:port,... (rediss+cluster:// for TLS): \
             one or more of the cluster's nodes",
        )
    };
    let rest = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((user, hosts)) => (format!("{user}@"), hosts),
        None => (String::new(), rest),
    };
    let nodes: Vec<String> = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| if h.contains(':') { h.to_owned() } else { format!("{h}:6379") })
        .map(|h| format!("{scheme}://{userinfo}{h}"))
        .collect();
    if nodes.is_empty() || hosts.split(',').any(|h| h.is_empty() || h.starts_with(':')) {
        return Some(Err(bad()));
    }
    Some(Ok(nodes))
}

/// A cluster connection on `seeds`: it learns the slots' primaries, follows
/// `MOVED` and `ASK`, and finds a promoted replica after a failover.
pub(super) async fn connect(
    seeds: &[String],
    call_limit: Duration,
    connect_limit: Duration,
) -> redis::RedisResult<ClusterConnection> {
    let client = ClusterClientBuilder::new(seeds.to_vec())
        .response_timeout(call_limit)
        .connection_timeout(connect_limit)
        .retries(4)
        .min_retry_wait(20)
        .max_retry_wait(400)
        .build()?;
    match tokio::time::timeout(5 * connect_limit, client.get_async_connection()).await {
        Ok(conn) => conn,
        Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "connecting to the cluster timed out"))),
    }
}

/// Appends the hash of a key as its key name carries it: on a cluster in
/// braces, its own hash tag.
pub(super) fn push_hash(name: &mut String, hash: &KeyHash, cluster: bool) {
    if cluster {
        name.push('{');
        crate::keys::push_hex(name, hash);
        name.push('}');
    } else {
        crate::keys::push_hex(name, hash);
    }
}

/// The hash slot of every key named for `hash` on a cluster.
pub(super) fn slot(hash: &KeyHash) -> u16 {
    let mut hex = String::with_capacity(64);
    crate::keys::push_hex(&mut hex, hash);
    crc16(hex.as_bytes()) % SLOTS
}

/// The slot of a key name: of its hash tag if it has one, as Redis reckons.
pub(super) fn slot_of_name(name: &[u8]) -> u16 {
    let tagged = name.iter().position(|&b| b == b'{').and_then(|open| {
        let close = name[open + 1..].iter().position(|&b| b == b'}')?;
        (close > 0).then(|| &name[open + 1..open + 1 + close])
    });
    crc16(tagged.unwrap_or(name)) % SLOTS
}

/// CRC16-CCITT (XMODEM), the checksum Redis Cluster's slots are made of.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31c3);
        assert_eq!(slot_of_name(b"foo"), 12_182);
        assert_eq!(slot_of_name(b"{user1000}.following"), slot_of_name(b"user1000"));
        assert_eq!(slot_of_name(b"foo{}{bar}"), slot_of_name(b"foo{}{bar}"), "an empty tag: the whole name");
        let hash = [7u8; 32];
        let mut name = String::from("p:1:abcd:");
        push_hash(&mut name, &hash, true);
        assert_eq!(slot_of_name(name.as_bytes()), slot(&hash));
    }

    #[test]
    fn parses_the_url_forms() {
        let nodes = seeds("redis+cluster://:pw@a:1,b:2,c").unwrap().unwrap();
        assert_eq!(nodes, ["redis://:pw@a:1", "redis://:pw@b:2", "redis://:pw@c:6379"]);
        assert_eq!(seeds("rediss+cluster://a:1").unwrap().unwrap(), ["rediss://a:1"]);
        assert!(seeds("redis://a:1").is_none());
        for bad in ["redis+cluster://", "redis+cluster://a:1,,b:2", "redis+cluster://:1"] {
            let err = seeds(bad).unwrap().unwrap_err().to_string();
            assert!(err.contains("redis+cluster://"), "{bad}: {err}");
        }
    }
}

#[cfg(test)]
mod resend {
    use super::super::batch::{Op, WriteCall, Written};
    use super::super::entry::Raw;
    use crate::{Entry, LimitStore, RedisStore};

    /// The cluster client sends a call again after a lost connection: a
    /// one-slot compare-and-set that ran already answers written, and the
    /// count is applied once.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_sent_twice_is_applied_once() {
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER") else { return };
        let prefix = format!("lst-resend-{}", std::process::id());
        let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
        let shared = &store.shared;
        let key = format!("k{}", crate::keys::hex(&shared.secret.key_hash(&prefix)));
        let hash = shared.secret.key_hash(&key);
        let (_, tag) = shared.families.of(shared.bound.counts(), &shared.secret, &key);
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        let expires_at = i64::try_from(since.as_millis()).unwrap() + 3_600_000;
        let entry = Entry { value: serde_json::json!(1), expires_at };
        let call = WriteCall {
            hashes: vec![hash],
            tags: vec![tag],
            expected: vec![Raw::none()],
            ops: vec![Op::Put { raw: Raw::encode(&entry), pxat: expires_at }],
            at: 0,
            lead: 0,
            lag: None,
            token: 42,
            claim: false,
        };
        let (call, first) = shared.batcher.write(call).await.unwrap();
        assert!(matches!(first, Ok(Written::Done { .. })), "{first:?}");
        let (_, again) = shared.batcher.write(call).await.unwrap();
        assert!(matches!(again, Ok(Written::Done { .. })), "sent again: {again:?}");
        assert_eq!(store.read(&[&key]).await.unwrap()[0], Some(entry));
    }

    /// A written update marks its first key's claim `done:` in place of its
    /// own claim, not after removing it: in a slot that is moving out, the
    /// node refuses a write to a key it no longer holds, and a mark lost so
    /// would let a call sent again be counted twice.
    #[tokio::test(flavor = "current_thread")]
    async fn a_claimed_write_in_a_moving_slot_leaves_its_mark() {
        use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER") else { return };
        let prefix = format!("lst-moving-{}", std::process::id());
        let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
        let shared = &store.shared;
        let key = format!("k{}", crate::keys::hex(&shared.secret.key_hash(&prefix)));
        let hash = shared.secret.key_hash(&key);
        let (_, tag) = shared.families.of(shared.bound.counts(), &shared.secret, &key);
        let slot = super::slot(&hash);
        let conn = shared.link.cluster().unwrap();
        let owner = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master)));
        let on_owner = |cmd: redis::Cmd| {
            let (mut conn, owner) = (conn.clone(), owner.clone());
            async move { conn.route_command(cmd, owner).await.unwrap() }
        };
        // The entry, and this update's own claim on it (as after a miss).
        assert_eq!(super::super::count::tests::add_one(&store, &key).await, 1);
        let entry = store.read(&[&key]).await.unwrap().pop().flatten().unwrap();
        let mut claim = format!("{prefix}:claim:{:x}:", shared.secret.generation());
        super::push_hash(&mut claim, &hash, true);
        on_owner(redis::cmd("SET").arg(&claim).arg(42).arg("PX").arg(10_000).clone()).await;
        // The slot starts moving to another primary (no key moves yet).
        let nodes: String =
            redis::from_redis_value(on_owner(redis::cmd("CLUSTER").arg("NODES").clone()).await).unwrap();
        let other = nodes
            .lines()
            .find(|l| {
                let flags = l.split_whitespace().nth(2).unwrap_or_default();
                flags.contains("master") && !flags.contains("myself") && !flags.contains("fail")
            })
            .and_then(|l| l.split_whitespace().next())
            .unwrap()
            .to_owned();
        on_owner(redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("MIGRATING").arg(&other).clone()).await;
        let next = Entry { value: serde_json::json!(2), expires_at: entry.expires_at };
        let call = WriteCall {
            hashes: vec![hash],
            tags: vec![tag],
            expected: vec![Raw::encode(&entry)],
            ops: vec![Op::Put { raw: Raw::encode(&next), pxat: next.expires_at }],
            at: 0,
            lead: 0,
            lag: None,
            token: 42,
            claim: true,
        };
        let first = shared.batcher.write(call).await;
        on_owner(redis::cmd("CLUSTER").arg("SETSLOT").arg(slot).arg("STABLE").clone()).await;
        let (call, first) = first.unwrap();
        assert!(matches!(first, Ok(Written::Done { .. })), "{first:?}");
        let (_, again) = shared.batcher.write(call).await.unwrap();
        assert!(matches!(again, Ok(Written::Done { .. })), "sent again: {again:?}");
        assert_eq!(store.read(&[&key]).await.unwrap()[0], Some(next));
        drop(conn);
    }
}
