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
//!   (`resolve.rs`). The steps of such updates ready at once go to each
//!   node in one call (`steps.rs`), as one-slot counts do.
//! - **Redirects and failovers** (`MOVED`, `ASK`, a replica promoted) are
//!   followed by the `redis` crate's cluster client; an `ASK` it could not
//!   follow under load is followed once more here (`ask.rs`). A one-slot
//!   write goes on a client that sends nothing again by itself, and is sent
//!   again only after an answer that says the node ran nothing of it
//!   (`once.rs`).
//! - **Every primary** is asked for `sweep`, the bound's count, `stats` and
//!   the eviction-policy check (`nodes.rs`).

pub(super) mod ask;
#[cfg(test)]
mod commit_point;
mod lock;
#[cfg(test)]
mod node_calls;
pub(super) mod node_script;
mod nodes;
pub(super) mod once;
mod read;
mod resolve;
mod scripts;
pub(super) mod slots;
pub(super) mod steps;
pub(super) mod txn;

use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

pub(super) use self::lock::is_lock;
pub(super) use self::nodes::{check_primaries, on, primaries, sweep};
pub(super) use self::read::{basis, snapshot};
use crate::key_hash::KeyHash;
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

/// A cluster connection on `seeds`: it learns the slots' primaries and
/// finds a promoted replica after a failover; with `retries`, it follows
/// `MOVED` and `ASK` and sends a call again after a lost connection (the
/// client's retries), without, it answers every failure as it comes
/// (`once.rs`).
pub(super) async fn connect(
    seeds: &[String],
    call_limit: Duration,
    connect_limit: Duration,
    retries: bool,
) -> redis::RedisResult<ClusterConnection> {
    let client = ClusterClientBuilder::new(seeds.to_vec())
        .response_timeout(call_limit)
        .connection_timeout(connect_limit)
        .retries(if retries { 4 } else { 0 })
        .min_retry_wait(20)
        .max_retry_wait(400)
        .build()?;
    match tokio::time::timeout(5 * connect_limit, client.get_async_connection()).await {
        Ok(conn) => conn,
        Err(_) => Err(redis::RedisError::from((redis::ErrorKind::Io, "connecting to the cluster timed out"))),
    }
}

/// Sends `cmd` to the node of `route`; with `replicas` > 0, followed by
/// `WAIT replicas wait_ms` in one pipeline on the same connection, which
/// covers every write of the call. The answer, and how many replicas
/// acknowledged (`u64::MAX` when none were asked for).
pub(super) async fn call_node(
    conn: &mut ClusterConnection,
    cmd: &redis::Cmd,
    route: &SingleNodeRoutingInfo,
    replicas: u32,
    wait_ms: u64,
) -> redis::RedisResult<(redis::Value, u64)> {
    if replicas == 0 {
        let value = conn.route_command(cmd.clone(), RoutingInfo::SingleNode(route.clone())).await?;
        return Ok((value.extract_error()?, u64::MAX));
    }
    let mut pipe = redis::pipe();
    pipe.add_command(cmd.clone()).cmd("WAIT").arg(replicas).arg(wait_ms);
    let mut values = conn.route_pipeline(pipe, 0, 2, route.clone()).await?.into_iter();
    let value = values.next().unwrap_or(redis::Value::Nil).extract_error()?;
    let acked = redis::from_redis_value(values.next().unwrap_or(redis::Value::Nil).extract_error()?)?;
    Ok((value, acked))
}

/// Appends the hash of a key as its key name carries it: on a cluster in
/// braces, its own hash tag.
pub(super) fn push_hash(name: &mut String, hash: &KeyHash, cluster: bool) {
    if cluster {
        name.push('{');
        crate::key_hash::push_hex(name, hash);
        name.push('}');
    } else {
        crate::key_hash::push_hex(name, hash);
    }
}

/// The hash slot of every key named for `hash` on a cluster.
pub(super) fn slot(hash: &KeyHash) -> u16 {
    crate::key_hash::hex_digits(hash).fold(0, crc16_step) % SLOTS
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
    bytes.iter().copied().fold(0, crc16_step)
}

/// The CRC16 of what `crc` covered followed by `byte`, a byte at a time.
fn crc16_step(crc: u16, byte: u8) -> u16 {
    (crc << 8) ^ CRC16_TABLE[usize::from((crc >> 8) as u8 ^ byte)]
}

/// The CRC16 of each byte's value shifted into the high byte (polynomial
/// 0x1021), computed when the crate is built.
const CRC16_TABLE: [u16; 256] = {
    let mut table = [0u16; 256];
    let mut i: u16 = 0;
    while i < 256 {
        let mut crc = i << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i as usize] = crc;
        i += 1;
    }
    table
};

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
