//! One-slot writes sent once.
//!
//! The rule: a one-slot count's compare-and-set (the write script of
//! `script.rs`) is never sent again after a failure that may have come
//! after the node ran it. It goes on a cluster connection of its own whose
//! client sends nothing again by itself (`Link::once`: no retries; the
//! store's other calls keep a client that retries, as they are safe to run
//! twice). The store sends it again only after an answer by which the node
//! says it ran nothing of it: `MOVED` (at once to the node it names), `ASK`
//! (`ask.rs`), `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `BUSY`,
//! `READONLY` (a replica writes nothing), or no connection to the node (the
//! call was never sent); `NOSCRIPT` is followed by its caller. Any other
//! failure, a lost connection or a timeout above all, may come after the
//! node ran the call: the count is answered unavailable and may have been
//! written, as on one server (`link.rs`), and as the guard answers a call
//! past its deadline.
//!
//! So every run of a count's compare-and-set is the one answer its count
//! gets: no count is written twice by a call sent again, and none answered
//! written is lost to it.

use std::future::Future;
use std::time::{Duration, Instant};

use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{ErrorKind, RedisError, RedisResult, ServerErrorKind};

use super::super::CALL_LIMIT;

/// How many times a call is sent, at most, while nodes answer that they ran
/// nothing of it (the retrying client's number, plus its first send).
const SENDS: u32 = 5;
/// The first wait before sending again, doubled each time up to the last.
const FIRST_WAIT: Duration = Duration::from_millis(20);
const LAST_WAIT: Duration = Duration::from_millis(400);

/// Runs `send` until it answers, or fails in a way that may follow a run of
/// the call, or the call's limit has passed since the first send (as the
/// retrying client bounds a call and its retries). `send` takes the node a
/// `MOVED` named, to send there (`None`: by the call's keys).
pub(in crate::store::redis) async fn send<T, F, Fut>(mut send: F) -> RedisResult<T>
where
    F: FnMut(Option<SingleNodeRoutingInfo>) -> Fut,
    Fut: Future<Output = RedisResult<T>>,
{
    let (mut wait, mut to) = (FIRST_WAIT, None);
    let (mut sends, started) = (0, Instant::now());
    loop {
        sends += 1;
        let direct = to.is_some();
        let err = match send(to.take()).await {
            Err(err) if sends < SENDS && started.elapsed() + wait < CALL_LIMIT && ran_nothing(&err) => err,
            answer => return answer,
        };
        // A `MOVED` goes straight to the node it names, once; anything else
        // waits for the cluster to settle and the client to learn its map.
        to = moved_to(&err).filter(|_| !direct);
        if to.is_none() {
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(LAST_WAIT);
        }
    }
}

/// True when the node (or the client) says it ran nothing of the call.
pub(super) fn ran_nothing(err: &RedisError) -> bool {
    matches!(
        err.kind(),
        ErrorKind::Server(
            ServerErrorKind::Moved
                | ServerErrorKind::Ask
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::BusyLoading
                | ServerErrorKind::ReadOnly
        ) | ErrorKind::ClusterConnectionNotFound
    ) || err.code() == Some("BUSY")
}

/// The node a `MOVED` names, as a route.
fn moved_to(err: &RedisError) -> Option<SingleNodeRoutingInfo> {
    if err.kind() != ErrorKind::Server(ServerErrorKind::Moved) {
        return None;
    }
    super::ask::node(err)
}

#[cfg(test)]
mod tests {
    use redis::{ErrorKind, RedisError, ServerErrorKind};

    fn server(kind: ServerErrorKind, detail: &str) -> RedisError {
        RedisError::from((ErrorKind::Server(kind), "An error was signalled by the server", detail.to_owned()))
    }

    #[test]
    fn only_what_ran_nothing_is_sent_again() {
        assert!(super::ran_nothing(&server(ServerErrorKind::Moved, "3300 127.0.0.1:27301")));
        assert!(super::ran_nothing(&server(ServerErrorKind::TryAgain, "")));
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!super::ran_nothing(&timeout), "a timeout may follow a run");
        let dropped = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!super::ran_nothing(&dropped), "a lost connection may follow a run");
        assert!(!super::ran_nothing(&server(ServerErrorKind::ResponseError, "")));
        let route = super::moved_to(&server(ServerErrorKind::Moved, "3300 127.0.0.1:27301"));
        assert!(
            matches!(&route, Some(redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { port: 27301, .. })),
            "{route:?}"
        );
    }
}

/// The rule on a real cluster: the one of `LIMIT_STORE_TEST_REDIS_CLUSTER`,
/// and one of a test's own (three primaries on free ports, started when that
/// variable says cluster tests run) whose nodes' limits it changes.
#[cfg(test)]
mod real {
    use std::path::PathBuf;
    use std::process::Command;

    use super::super::super::batch::{Op, WriteCall};
    use super::super::super::entry::Raw;
    use crate::{update_with, Entry, LimitStore, RedisStore, Write};

    struct Own {
        dir: PathBuf,
        base: u16,
        url: String,
    }

    fn script() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".ci/redis-topologies")
    }

    impl Own {
        fn start() -> Option<Own> {
            std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER").ok()?;
            let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
            let start = 41_000 + u16::try_from(std::process::id() % 400).unwrap() * 10;
            let base = (start..45_000).step_by(3).find(|&b| (b..b + 3).all(|p| free(p) && free(p + 10_000)))?;
            let dir = std::env::temp_dir().join(format!("lst-once-{}-{base}", std::process::id()));
            let out = Command::new(script())
                .args(["cluster", dir.to_str()?, &base.to_string(), "--replicas", "0"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            Some(Own { dir, base, url: String::from_utf8(out.stdout).unwrap().trim().to_owned() })
        }
    }

    impl Own {
        /// Sets every node's output limit of a normal client (hard, soft, seconds).
        fn limit_output(&self, limit: &str) {
            for port in self.base..self.base + 3 {
                let limit = format!("normal {limit}");
                let out = Command::new("redis-cli")
                    .args(["-p", &port.to_string(), "CONFIG", "SET", "client-output-buffer-limit", &limit])
                    .output()
                    .unwrap();
                assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "OK");
            }
        }
    }

    impl Drop for Own {
        fn drop(&mut self) {
            let _ = Command::new(script()).args(["stop", self.dir.to_str().unwrap()]).output();
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// The connection of writes answers a `MOVED` as it comes, where the
    /// store's other connection follows it; [`send`](super::send) follows
    /// it to the node it names.
    #[tokio::test(flavor = "current_thread")]
    async fn the_write_connection_sends_nothing_again_by_itself() {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let Ok(url) = std::env::var("LIMIT_STORE_TEST_REDIS_CLUSTER") else { return };
        let prefix = format!("lst-once-{}", std::process::id());
        let store = RedisStore::builder(&url).secret(&"s".repeat(40)).prefix(&prefix).connect().await.unwrap();
        let (once, retrying) = (store.shared.link.once().unwrap(), store.shared.link.cluster().unwrap());
        let name = format!("{prefix}:{{x}}");
        let get = redis::cmd("GET").arg(&name).clone();
        let seeds = super::super::seeds(&url).unwrap().unwrap();
        let mut moved = 0;
        for seed in &seeds {
            let (host, port) = seed.trim_start_matches("redis://").rsplit_once(':').unwrap();
            let node = SingleNodeRoutingInfo::ByAddress { host: host.to_owned(), port: port.parse().unwrap() };
            let to = RoutingInfo::SingleNode(node.clone());
            let direct = once.clone().route_command(get.clone(), to.clone()).await;
            if matches!(&direct, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved)) {
                moved += 1;
                assert_eq!(retrying.clone().route_command(get.clone(), to).await.unwrap(), redis::Value::Nil);
                let followed = super::send(|next| {
                    let (mut conn, get) = (once.clone(), get.clone());
                    let route = RoutingInfo::SingleNode(next.unwrap_or_else(|| node.clone()));
                    async move { conn.route_command(get, route).await }
                })
                .await;
                assert_eq!(followed.unwrap(), redis::Value::Nil, "followed to {seed}'s MOVED");
            } else {
                assert_eq!(direct.unwrap(), redis::Value::Nil);
            }
        }
        assert!(moved > 0, "some seed does not serve the key's slot: {seeds:?}");
    }

    async fn add_one(store: &RedisStore, key: &str) -> Result<u64, crate::StoreError> {
        update_with(store, &[key], |current, now| {
            let n = current[0].as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
            (vec![Write::Put(Entry { value: n.into(), expires_at: now + 60_000 })], n)
        })
        .await
    }

    /// Three updates in one write call on two keys of one slot: `a` writes
    /// key 1, `b` misses on key 2 (which holds a value too big for the
    /// node's output limit, so the call's answer is lost with its
    /// connection, after the call ran), `c` puts a small value there. Each
    /// is answered unavailable, the call ran once (key 1 moved once), and
    /// counting goes on at once on a new connection. (A call sent again
    /// would answer `a` changed, and its count would be tried again on what
    /// the first run wrote: counted twice.)
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_whose_answer_is_lost_is_not_sent_again() {
        let Some(own) = Own::start() else { return };
        let store = RedisStore::builder(&own.url).secret(&"s".repeat(40)).prefix("lst-once").connect().await.unwrap();
        let shared = &store.shared;
        assert_eq!(add_one(&store, "k").await.unwrap(), 1);
        let entry = store.read(&["k"]).await.unwrap().pop().flatten().unwrap();
        let hash = shared.secret.key_hash("k");
        let slot = super::super::slot(&hash);
        let other = (0..)
            .map(|i| format!("b{i}"))
            .find(|name| super::super::slot(&shared.secret.key_hash(name)) == slot)
            .unwrap();
        let (_, tag) = shared.families.of(shared.bound.counts(), &shared.secret, "k");
        let (_, other_tag) = shared.families.of(shared.bound.counts(), &shared.secret, &other);
        let other_hash = shared.secret.key_hash(&other);
        let big = vec![b'x'; 40_000];
        let mut conn = shared.link.cluster().unwrap();
        let name = store.name(other_tag, &other_hash);
        let () = redis::cmd("SET").arg(&name).arg(&big).arg("PX").arg(60_000).query_async(&mut conn).await.unwrap();
        let next = Entry { value: serde_json::json!(2), expires_at: entry.expires_at };
        let call = |hash, tag, expected, raw: Raw| WriteCall {
            hashes: vec![hash],
            tags: vec![tag],
            expected: vec![expected],
            ops: vec![Op::Put { raw, pxat: entry.expires_at }],
            at: 0,
            lead: 0,
            lag: None,
            token: 42,
            claim: false,
        };
        let a = call(hash, tag, Raw::encode(&entry), Raw::encode(&next));
        let b = call(other_hash, other_tag, Raw::none(), Raw::encode(&next));
        let c = call(other_hash, other_tag, Raw::from_bytes(big), Raw::encode(&entry));
        own.limit_output("1024 0 0");
        let batcher = &shared.batcher;
        let (a, b, c) = tokio::join!(batcher.write(a), batcher.write(b), batcher.write(c));
        assert_eq!(batcher.batched(), 3, "one call");
        own.limit_output("0 0 0");
        for (name, sent) in [("a", a), ("b", b), ("c", c)] {
            let (_, answer) = sent.unwrap();
            assert!(matches!(&answer, Err(e) if e.is_unavailable()), "{name}: {answer:?}");
        }
        let held = store.read(&["k", &other]).await.unwrap();
        assert_eq!(held, [Some(next), Some(entry)], "the call ran once");
        assert_eq!(add_one(&store, "k").await.unwrap(), 3, "counting goes on at once");
    }
}
