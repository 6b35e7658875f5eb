//! `ASK` followed whole, while a slot moves between primaries.
//!
//! The old owner answers `ASK <slot> <node>` for a key it no longer holds;
//! the command must then reach the new owner right after `ASKING`, a flag
//! that lasts one command. The cluster client sends `ASKING` and the command
//! as two requests on the node's shared connection, so under load another
//! request can come between them and take the flag: the command meets
//! `MOVED` back to the old owner, which answers `ASK` again, until the
//! client's retries run out and the call fails with `ASK`. A call that ends
//! so is sent once more as one pipeline, `ASKING` then the command, to the
//! node the `ASK` names: one write on that connection, nothing between them.
//!
//! Sending it again is safe for any call: a node answers `ASK` or `MOVED`
//! before it runs anything of the command (`once.rs` relies on it too).

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

/// Sends `cmd`; if it fails with `ASK`, once more after `ASKING` in one
/// pipeline to the node the `ASK` names.
pub(in crate::store::redis) async fn command(conn: &mut ClusterConnection, cmd: &redis::Cmd) -> RedisResult<Value> {
    use redis::aio::ConnectionLike;
    let err = match conn.req_packed_command(cmd).await {
        Err(err) if is_ask(&err) => err,
        answer => return answer,
    };
    let Some(node) = node(&err) else { return Err(err) };
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING").add_command(cmd.clone());
    let mut answers = conn.route_pipeline(pipe, 1, 1, node).await?;
    answers.pop().ok_or(err)?.extract_error()
}

/// [`command`] for a `cmd` whose keys are all of `slot`, sent to the slot's
/// primary as the client routes it and handed over whole (no copy of it, no
/// second parse of its keys for the route); `again` builds it anew for the
/// rare send after an `ASK`.
pub(in crate::store::redis) async fn command_to_slot(
    conn: &mut ClusterConnection,
    cmd: redis::Cmd,
    slot: u16,
    again: impl FnOnce() -> redis::Cmd,
) -> RedisResult<Value> {
    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master)));
    match conn.route_command(cmd, route).await.and_then(Value::extract_error) {
        Err(err) if is_ask(&err) => {}
        answer => return answer,
    }
    command(conn, &again()).await
}

/// Sends the `count` answers of `pipeline` from `offset` on; if it fails
/// with `ASK`, once more after `ASKING` to the node the `ASK` names (a
/// non-transaction pipeline: its first command is the redirected one, and
/// the rest of ours name no key).
pub(in crate::store::redis) async fn pipeline(
    conn: &mut ClusterConnection,
    pipeline: &redis::Pipeline,
    offset: usize,
    count: usize,
) -> RedisResult<Vec<Value>> {
    use redis::aio::ConnectionLike;
    let err = match conn.req_packed_commands(pipeline, offset, count).await {
        Err(err) if is_ask(&err) && !pipeline.is_transaction() => err,
        answer => return answer,
    };
    let Some(node) = node(&err) else { return Err(err) };
    let mut pipe = redis::pipe();
    pipe.cmd("ASKING");
    for cmd in pipeline.cmd_iter() {
        pipe.add_command(cmd.clone());
    }
    conn.route_pipeline(pipe, offset + 1, count, node).await
}

fn is_ask(err: &redis::RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::Ask)
}

/// The node an `ASK` or a `MOVED` names, as a route.
pub(super) fn node(err: &redis::RedisError) -> Option<SingleNodeRoutingInfo> {
    let (addr, _slot) = err.redirect_node()?;
    let (host, port) = addr.rsplit_once(':')?;
    Some(SingleNodeRoutingInfo::ByAddress { host: host.trim_matches(['[', ']']).to_owned(), port: port.parse().ok()? })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_node_an_ask_names() {
        let err = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::Ask),
            "An error was signalled by the server",
            "3300 127.0.0.1:27301".to_owned(),
        ));
        assert!(super::is_ask(&err));
        let route = super::node(&err).expect("a node");
        assert!(
            matches!(&route, redis::cluster_routing::SingleNodeRoutingInfo::ByAddress { host, port: 27301 } if host == "127.0.0.1"),
            "{route:?}"
        );
    }
}
