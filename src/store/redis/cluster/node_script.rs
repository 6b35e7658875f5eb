//! A script that runs the calls of several slots of one node (`WRITE_NODE`
//! for one-slot writes, `NODE` for steps): it declares no key, which only
//! Redis 7 allows (`allow-cross-slot-keys`), so whether the nodes can run it
//! is learned from the first that can't.

use std::sync::atomic::{AtomicBool, Ordering};

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::SingleNodeRoutingInfo;
use redis::{Cmd, RedisResult, Script, Value};

/// A node's script, and whether the nodes run it.
pub(in crate::store::redis) struct NodeScript {
    script: Script,
    /// False once a node could not compile it: its callers send per slot
    /// (or alone) from then on.
    usable: AtomicBool,
}

impl NodeScript {
    pub(in crate::store::redis) fn new(script: Script) -> Self {
        NodeScript { script, usable: AtomicBool::new(true) }
    }

    /// False once a node could not compile the script.
    pub(in crate::store::redis) fn usable(&self) -> bool {
        self.usable.load(Ordering::Relaxed)
    }

    /// The script's hash, for its calls (`EVALSHA`).
    pub(in crate::store::redis) fn hash(&self) -> &str {
        self.script.get_hash()
    }

    /// Sends `cmd`, a call of this script, as [`call_node`](super::call_node)
    /// does; a node that answers it holds no such script gets it loaded,
    /// and the call once more (it ran nothing).
    pub(in crate::store::redis) async fn call(
        &self,
        conn: &mut ClusterConnection,
        cmd: &Cmd,
        route: &SingleNodeRoutingInfo,
        replicas: u32,
        wait_ms: u64,
    ) -> RedisResult<(Value, u64)> {
        let reply = super::call_node(conn, cmd, route, replicas, wait_ms).await;
        if !matches!(&reply, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)) {
            return reply;
        }
        match self.script.load_async(conn).await {
            Ok(_) => super::call_node(conn, cmd, route, replicas, wait_ms).await,
            Err(e) => {
                // A node that can't compile it (before Redis 7).
                if e.to_string().contains("compiling") {
                    self.usable.store(false, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }
}
