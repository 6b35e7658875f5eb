//! A server that became a replica: after a failover, the server a plain
//! `redis://` URL names is often the old primary, now a replica that answers
//! every write with `READONLY`. Its counts are answered unavailable (nothing
//! was written), and an error says once a minute what happened and what to
//! do: name the new primary, or let Sentinel follow failovers
//! (`redis+sentinel://`).

use crate::log::{Kind, Throttle};

/// What a count answered unavailable for `READONLY` says.
pub(super) const DETAIL: &str = "the Redis server is a replica (it answered READONLY, as the old primary does after a \
     failover): nothing was written; point redis_url at the primary, or use \
     redis+sentinel://host:port,.../MASTER_NAME so that the store follows failovers";

/// At most one line a minute, however many counts meet the replica.
static LOG: Throttle = Throttle::new();

/// Notes a `READONLY` answer: logs it, at most once a minute.
pub(super) fn noticed() {
    if LOG.ready() {
        tracing::error!(
            kind = Kind::RedisReplica.as_str(),
            "the Redis server the store writes to is a replica (READONLY), as after a failover: every count is \
             answered unavailable until redis_url names the primary; a plain redis:// URL does not follow \
             failovers, redis+sentinel://host:port,.../MASTER_NAME does"
        );
    }
}
