//! What the store asks of every primary of a cluster: its version and
//! eviction policy at connect, and its keys for the bound's count and the
//! sweep (`SCAN` walks one node's keys; each primary holds its own slots).

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use super::super::server::ServerInfo;
use super::super::Shared;
use super::read::by_slot;
use crate::StoreError;

/// A primary's address, `(host, port)`.
pub(in crate::store::redis) type Node = (String, u16);

/// The cluster's primaries now, as `CLUSTER NODES` on any node lists them.
pub(in crate::store::redis) async fn primaries(conn: &mut ClusterConnection) -> redis::RedisResult<Vec<Node>> {
    let nodes = redis::cmd("CLUSTER").arg("NODES").clone();
    let answer = conn.route_command(nodes, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random)).await?;
    let text: String = redis::from_redis_value(answer)?;
    Ok(parse_nodes(&text))
}

/// The primaries in `CLUSTER NODES`' text: `id host:port@bus[,name] flags …`,
/// those flagged `master` and neither failing nor serving no slot.
fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = fields.get(2)?;
            if !flags.split(',').any(|f| f == "master") || flags.contains("fail") || fields.len() < 9 {
                return None;
            }
            let addr = fields.get(1)?.split(['@', ',']).next()?;
            let (host, port) = addr.rsplit_once(':')?;
            Some((host.trim_matches(['[', ']']).to_owned(), port.parse().ok()?))
        })
        .collect()
}

/// Sends `cmd` to the node `node`.
pub(in crate::store::redis) async fn on(
    conn: &mut ClusterConnection,
    node: &Node,
    cmd: &redis::Cmd,
) -> redis::RedisResult<Value> {
    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host: node.0.clone(), port: node.1 });
    conn.route_command(cmd.clone(), routing).await
}

/// Checks every primary as one server is checked (version), and answers
/// what the store reports of them: an evicting primary's info if any is.
pub(in crate::store::redis) async fn check_primaries(
    conn: &mut ClusterConnection,
    url: &str,
) -> Result<ServerInfo, StoreError> {
    let unreachable = |e: redis::RedisError| StoreError::Setup {
        detail: format!("can't ask the primaries of the Redis Cluster at {url}: check that the cluster is up"),
        source: Some(Box::new(e)),
    };
    let nodes = primaries(conn).await.map_err(unreachable)?;
    if nodes.is_empty() {
        return Err(StoreError::setup(format!("the Redis Cluster at {url} lists no primary: is it set up?")));
    }
    let mut chosen: Option<ServerInfo> = None;
    for node in &nodes {
        let answer = on(conn, node, &redis::cmd("INFO")).await.map_err(unreachable)?;
        let text: String = redis::from_redis_value(answer).map_err(|e| unreachable(e.into()))?;
        let mut info = ServerInfo::parse(&text);
        // A cluster node, reached as one: the check of one server refuses it.
        info.cluster = false;
        let at = format!("{url} (primary {}:{})", node.0, node.1);
        info.check(&at)?;
        info.warn_if_evicting(&at);
        if chosen.as_ref().is_none_or(|c| !c.evicts() && info.evicts()) {
            chosen = Some(info);
        }
    }
    Ok(chosen.expect("one primary at least"))
}

/// Removes those of `keys` whose entry has expired (one sweep script per
/// slot on a cluster, where a script's keys share a slot); answers how many.
pub(in crate::store::redis) async fn sweep(
    shared: &Shared,
    cluster: bool,
    keys: &[Vec<u8>],
) -> redis::RedisResult<u64> {
    if !cluster {
        return shared.scripts.sweep(&mut shared.link.conn(), keys).await;
    }
    let groups = by_slot(keys.iter().map(|k| super::slot_of_name(k)));
    let calls = groups.iter().map(|group| {
        let keys: Vec<Vec<u8>> = group.iter().map(|&i| keys[i].clone()).collect();
        let mut conn = shared.link.conn();
        async move { shared.scripts.sweep(&mut conn, &keys).await }
    });
    let mut gone = 0;
    for removed in futures_util::future::join_all(calls).await {
        gone += removed?;
    }
    Ok(gone)
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_primaries() {
        let text = "a 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922\n\
                    b 127.0.0.1:7005@17005 slave a 0 1 1 connected\n\
                    c 127.0.0.1:7000@17000,host myself,master - 0 0 1 connected 0-5460\n\
                    d 127.0.0.1:7002@17002 master,fail - 0 1 3 connected\n";
        assert_eq!(super::parse_nodes(text), [("127.0.0.1".to_owned(), 7001), ("127.0.0.1".to_owned(), 7000)]);
    }
}
