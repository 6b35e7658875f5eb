//! What the store checks of the server when it connects: its version, that it
//! is not a Cluster, and whether it may evict entries.

use crate::StoreError;

use crate::log::Kind;

/// The oldest server with `SET … PXAT` (Redis 6.2; every Valkey).
const OLDEST: (u32, u32) = (6, 2);

/// What `INFO` said of the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ServerInfo {
    /// `redis_version` (Valkey reports one too).
    pub(super) version: String,
    /// `maxmemory_policy`; `noeviction` is the only safe one.
    pub(super) policy: String,
    /// `cluster_enabled:1`.
    pub(super) cluster: bool,
}

impl ServerInfo {
    /// Reads the fields the store needs from `INFO`'s text.
    pub(super) fn parse(info: &str) -> Self {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name).and_then(|rest| rest.strip_prefix(':')))
                .map(|v| v.trim().to_owned())
        };
        ServerInfo {
            version: field("redis_version").unwrap_or_default(),
            policy: field("maxmemory_policy").unwrap_or_else(|| "noeviction".into()),
            cluster: field("cluster_enabled").as_deref() == Some("1"),
        }
    }

    /// True when the server may drop keys that carry a TTL (every policy but
    /// `noeviction`: ours always carry one).
    pub(super) fn evicts(&self) -> bool {
        self.policy != "noeviction"
    }

    /// Refuses a server the store can't keep exact on.
    pub(super) fn check(&self, url: &str) -> Result<(), StoreError> {
        if self.cluster {
            return Err(StoreError::setup(format!(
                "{url} is a Redis Cluster node: through redis:// the Redis store would send an update over \
                 several keys to one node, which a Cluster refuses; use \
                 redis+cluster://host:port,host:port,... for a cluster, or point redis_url at a standalone Redis \
                 or Valkey"
            )));
        }
        let mut parts = self.version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
        let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if version < OLDEST {
            return Err(StoreError::setup(format!(
                "{url} runs Redis {}: the Redis store needs Redis 6.2 or later, or Valkey (for SET … PXAT)",
                if self.version.is_empty() { "of an unknown version" } else { &self.version }
            )));
        }
        Ok(())
    }

    /// Logs, as an error, that the server may evict entries.
    pub(super) fn warn_if_evicting(&self, url: &str) {
        if self.evicts() {
            tracing::error!(
                kind = Kind::RedisEvicts.as_str(),
                url,
                policy = %self.policy,
                "Redis may evict limit entries (maxmemory-policy {}): a lockout can silently vanish under memory \
                 pressure; use a dedicated instance with maxmemory-policy noeviction",
                self.policy
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n# Memory\r\n\
                        maxmemory_policy:allkeys-lru\r\n# Cluster\r\ncluster_enabled:0\r\n";

    #[test]
    fn reads_what_it_needs() {
        let info = ServerInfo::parse(INFO);
        assert_eq!(info.version, "7.0.15");
        assert_eq!(info.policy, "allkeys-lru");
        assert!(info.evicts() && !info.cluster);
        assert!(info.check("redis://x").is_ok());
    }

    #[test]
    fn refuses_a_cluster_and_an_old_server() {
        let cluster = ServerInfo::parse(&INFO.replace("cluster_enabled:0", "cluster_enabled:1"));
        let err = cluster.check("redis://x").unwrap_err().to_string();
        assert!(err.contains("Cluster") && err.contains("standalone"), "{err}");
        let old = ServerInfo::parse(&INFO.replace("7.0.15", "6.0.9"));
        assert!(old.check("redis://x").unwrap_err().to_string().contains("6.2 or later"));
        assert!(ServerInfo::parse(&INFO.replace("7.0.15", "6.2.0")).check("redis://x").is_ok());
        assert!(!ServerInfo::parse("redis_version:8.0.0\r\n").evicts(), "no policy reported: the default");
    }
}
