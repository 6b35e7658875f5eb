//! Moving a Redis Cluster's slots from one primary to another under a
//! test's feet, the way `redis-cli --cluster reshard` moves them, and
//! finding key names whose keys lie in the slots that move.

use std::time::Duration;

use crate::redis_cluster::Topology;

pub(crate) use crate::common::redis::{names_in, slot_of, Secret};

/// How long a slot's move pauses at each step.
const PAUSE: Duration = Duration::from_millis(10);

/// A connection to one node of the topology.
fn node(port: u16) -> redis::Connection {
    redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap().get_connection().unwrap()
}

/// One slot's move: from the primary on `from` to the one on `to`.
#[derive(Clone, Copy)]
pub(crate) struct Move {
    pub(crate) slot: u16,
    pub(crate) from: u16,
    pub(crate) to: u16,
}

/// Moves the slots, one after another, as `redis-cli --cluster reshard`
/// does, a few keys per `MIGRATE`, with pauses (before the first key moves,
/// between, and after the last) so that calls meet each slot half moved.
/// `primaries` are told the new owner at the end of each slot's move; `mid`
/// runs when a slot's keys have all moved and the old owner still owns it.
pub(crate) fn reshard(moves: &[Move], primaries: &[u16], mid: &mut dyn FnMut(&Move)) {
    let ids: Vec<(u16, String)> =
        primaries.iter().map(|&p| (p, redis::cmd("CLUSTER").arg("MYID").query(&mut node(p)).unwrap())).collect();
    let id = |port: u16| ids.iter().find(|(p, _)| *p == port).map(|(_, id)| id.clone()).unwrap();
    let mut conns: Vec<(u16, redis::Connection)> = primaries.iter().map(|&p| (p, node(p))).collect();
    let mut on = |port: u16, cmd: &redis::Cmd| -> redis::Value {
        let conn = &mut conns.iter_mut().find(|(p, _)| *p == port).unwrap().1;
        cmd.query(conn).unwrap_or_else(|e| panic!("{port}: {cmd:?}: {e}"))
    };
    let setslot = |slot: u16, state: &str, id: String| {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
        cmd
    };
    for m in moves {
        on(m.to, &setslot(m.slot, "IMPORTING", id(m.from)));
        on(m.from, &setslot(m.slot, "MIGRATING", id(m.to)));
        std::thread::sleep(PAUSE);
        loop {
            let keys = on(m.from, redis::cmd("CLUSTER").arg("GETKEYSINSLOT").arg(m.slot).arg(10));
            let keys: Vec<Vec<u8>> = redis::from_redis_value(keys).unwrap();
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate.arg("127.0.0.1").arg(m.to).arg("").arg(0).arg(5_000).arg("KEYS").arg(&keys);
            on(m.from, &migrate);
            std::thread::sleep(PAUSE);
        }
        mid(m);
        // The new owner first, then the old one, then the others.
        on(m.to, &setslot(m.slot, "NODE", id(m.to)));
        on(m.from, &setslot(m.slot, "NODE", id(m.to)));
        for &other in primaries.iter().filter(|&&p| p != m.to && p != m.from) {
            on(other, &setslot(m.slot, "NODE", id(m.to)));
        }
    }
}

/// How many times the primaries answered `error` (`ASK`, `MOVED`, …)
/// since their statistics were reset.
pub(crate) fn errors(topology: &Topology, primaries: &[u16], error: &str) -> u64 {
    let needle = format!("errorstat_{error}:count=");
    let count = |p: u16| {
        let info = topology.cli(p, &["INFO", "errorstats"]);
        info.lines().find_map(|l| l.strip_prefix(&needle)?.split(',').next()?.trim().parse().ok()).unwrap_or(0)
    };
    primaries.iter().map(|&p| count(p)).sum()
}
