//! Which primary serves each slot, as this store last heard: enough to send
//! the one-slot counts bound for one node in one call (`batch.rs`).
//!
//! The map is only a guess for grouping: a call built on it goes to the node
//! the cluster client routes the group's first slot to, and a count whose slot
//! that node does not serve (the map is stale, the slot is moving) is answered
//! there as not served, with nothing written, and is sent again on its own
//! slot's route. Such an answer asks for the map again (at most every
//! [`ASK_EVERY`]); until the first answer, counts go one call per slot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::SLOTS;

/// Ask for the map again at most this often.
const ASK_EVERY: Duration = Duration::from_millis(250);
/// No primary known for a slot.
const UNKNOWN: u16 = u16::MAX;

/// The slots' primaries, each named by an index of the last `CLUSTER NODES`.
#[derive(Debug)]
pub(in crate::store::redis) struct SlotMap {
    /// Per slot, its primary's index, or [`UNKNOWN`].
    nodes: RwLock<Option<Arc<[u16]>>>,
    asking: AtomicBool,
    last: Mutex<Option<Instant>>,
}

impl SlotMap {
    pub(in crate::store::redis) fn new() -> Arc<Self> {
        Arc::new(SlotMap { nodes: RwLock::new(None), asking: AtomicBool::new(false), last: Mutex::new(None) })
    }

    /// The map now: `node(slot)` names a slot's primary, `None` if not known.
    /// Asks for it first (in the background) if it was never had.
    pub(in crate::store::redis) fn now(self: &Arc<Self>, conn: &ClusterConnection) -> Option<Arc<[u16]>> {
        let nodes = self.nodes.read().clone();
        if nodes.is_none() {
            self.ask(conn);
        }
        nodes
    }

    /// Whether the map is known.
    #[cfg(test)]
    pub(in crate::store::redis) fn known(&self) -> bool {
        self.nodes.read().is_some()
    }

    /// Takes `node` for the primary of every slot (a stale map), and keeps it
    /// for [`ASK_EVERY`].
    #[cfg(test)]
    pub(in crate::store::redis) fn set_all(&self, node: u16) {
        *self.nodes.write() = Some(vec![node; usize::from(SLOTS)].into());
        *self.last.lock() = Some(Instant::now());
    }

    /// Asks for the map again in the background, unless asked lately.
    pub(in crate::store::redis) fn ask(self: &Arc<Self>, conn: &ClusterConnection) {
        {
            let mut last = self.last.lock();
            if last.is_some_and(|at| at.elapsed() < ASK_EVERY) || self.asking.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        let (map, mut conn) = (self.clone(), conn.clone());
        tokio::spawn(async move {
            let nodes = redis::cmd("CLUSTER").arg("NODES").clone();
            let answer = conn.route_command(nodes, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random)).await;
            if let Ok(text) = answer.and_then(|a| Ok(redis::from_redis_value::<String>(a)?)) {
                *map.nodes.write() = Some(parse(&text).into());
            }
            map.asking.store(false, Ordering::Release);
        });
    }
}

/// The primary of `slot` in `nodes`, if known.
pub(in crate::store::redis) fn node(nodes: &[u16], slot: u16) -> Option<u16> {
    nodes.get(usize::from(slot)).copied().filter(|&n| n != UNKNOWN)
}

/// Per slot, the index of its primary among the primaries of `CLUSTER NODES`'
/// text (`id host:port@bus flags master ping pong epoch link slot...`);
/// a slot named `[slot->-id]` or `[slot-<-id]` (moving) is left to its range.
fn parse(text: &str) -> Vec<u16> {
    let mut nodes = vec![UNKNOWN; usize::from(SLOTS)];
    let primaries = text.lines().filter(|line| {
        let flags = line.split_whitespace().nth(2).unwrap_or_default();
        flags.split(',').any(|f| f == "master") && !flags.contains("fail")
    });
    for (index, line) in primaries.enumerate() {
        let Ok(index) = u16::try_from(index) else { break };
        for range in line.split_whitespace().skip(8).filter(|r| !r.starts_with('[')) {
            let (from, to) = range.split_once('-').unwrap_or((range, range));
            let (Ok(from), Ok(to)) = (from.parse::<usize>(), to.parse::<usize>()) else { continue };
            for slot in nodes.iter_mut().take(to + 1).skip(from) {
                *slot = index;
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_slots_primaries() {
        let text = "a 127.0.0.1:7001@17001 master - 0 1 2 connected 5461-10922 [5461->-c]\n\
                    b 127.0.0.1:7005@17005 slave a 0 1 1 connected\n\
                    c 127.0.0.1:7000@17000,host myself,master - 0 0 1 connected 0-5460 16000\n\
                    d 127.0.0.1:7002@17002 master,fail - 0 1 3 connected 10923-15999\n";
        let nodes = super::parse(text);
        assert_eq!(super::node(&nodes, 5461), Some(0));
        assert_eq!(super::node(&nodes, 10_922), Some(0));
        assert_eq!(super::node(&nodes, 0), Some(1));
        assert_eq!(super::node(&nodes, 16_000), Some(1));
        assert_eq!(super::node(&nodes, 10_923), None, "a failing primary's slots are not known");
        assert_eq!(super::node(&nodes, 16_001), None);
    }
}
