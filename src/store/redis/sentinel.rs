//! Sentinel: `redis+sentinel://host:port,host:port,.../MASTER_NAME` (and
//! `rediss+sentinel://` with TLS). The store asks the Sentinels for the
//! primary of `MASTER_NAME`, checks with `ROLE` that the server it names is a
//! primary, and asks again when the primary changes: on a `+switch-master`
//! message from any Sentinel, and when the server it writes to answers
//! `READONLY` or stops answering (`link.rs`).
//!
//! A password (or `user:password`) in the URL is the primary's and the
//! Sentinels': a Sentinel is asked with it, and, if it refuses it as one it
//! does not need (no `requirepass` there), without.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use crate::StoreError;

/// How long asking one Sentinel (or checking one primary) may take.
pub(super) const ASK_LIMIT: Duration = Duration::from_millis(500);

/// A parsed `redis+sentinel://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct SentinelUrl {
    /// `redis` or `rediss`: how to reach the Sentinels and the primary.
    scheme: &'static str,
    /// `user:password@`, or empty.
    userinfo: String,
    /// `host:port` of each Sentinel.
    sentinels: Vec<String>,
    /// The primary's name as the Sentinels know it.
    pub(super) name: String,
}

impl SentinelUrl {
    /// `Some` for a `redis+sentinel://` or `rediss+sentinel://` URL (or a
    /// clear error if it is malformed); `None` for any other URL.
    pub(super) fn parse(url: &str) -> Option<Result<Self, StoreError>> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            ("redis", rest)
        } else if let Some(rest) = url.strip_prefix("rediss+sentinel://") {
            ("rediss", rest)
        } else {
            return None;
        };
        let bad = || {
            StoreError::setup(
                "a Sentinel URL is redis+sentinel://[:password@]host:port,host:port,.../MASTER_NAME \
                 (rediss+sentinel:// for TLS): at least one Sentinel and the primary's name",
            )
        };
        Some((|| {
            let (hosts, name) = rest.split_once('/').ok_or_else(bad)?;
            let (userinfo, hosts) = match hosts.rsplit_once('@') {
                Some((user, hosts)) => (format!("{user}@"), hosts),
                None => (String::new(), hosts),
            };
            let name = name.split(['?', '#']).next().unwrap_or_default();
            let sentinels: Vec<String> = hosts
                .split(',')
                .map(|h| if h.contains(':') { h.to_owned() } else { format!("{h}:26379") })
                .filter(|h| !h.starts_with(':'))
                .collect();
            if name.is_empty() || name.contains('/') || sentinels.is_empty() || hosts.is_empty() {
                return Err(bad());
            }
            Ok(SentinelUrl { scheme, userinfo, sentinels, name: name.to_owned() })
        })())
    }

    /// The URL of the Sentinel `host_port`, with the URL's password or not.
    fn sentinel(&self, host_port: &str, password: bool) -> String {
        let userinfo = if password { self.userinfo.as_str() } else { "" };
        format!("{}://{userinfo}{host_port}", self.scheme)
    }

    /// Every Sentinel's `host:port`.
    pub(super) fn sentinels(&self) -> impl Iterator<Item = &str> + '_ {
        self.sentinels.iter().map(String::as_str)
    }

    /// Opens what `open` makes of the Sentinel `host_port`'s URL: with the
    /// URL's password, or, when that Sentinel refuses it (one that needs
    /// none, or knows no such user), without.
    pub(super) async fn with_sentinel<T, F, Fut>(&self, host_port: &str, open: F) -> Result<T, String>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, redis::RedisError>>,
    {
        let first = match tokio::time::timeout(ASK_LIMIT, open(self.sentinel(host_port, true))).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => e,
            Err(_) => return Err("no answer in time".to_owned()),
        };
        if self.userinfo.is_empty() || first.is_io_error() || first.is_timeout() {
            return Err(first.to_string());
        }
        match tokio::time::timeout(ASK_LIMIT, open(self.sentinel(host_port, false))).await {
            Ok(Ok(v)) => Ok(v),
            _ => Err(first.to_string()),
        }
    }

    /// The URL of the primary at `host:port`, with the URL's password.
    pub(super) fn primary(&self, host: &str, port: u16) -> String {
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_owned() };
        format!("{}://{}{host}:{port}", self.scheme, self.userinfo)
    }

    /// Asks the Sentinels, in turn, for the primary; the URL of the first
    /// answer whose server says it is a primary.
    pub(super) async fn ask(&self) -> Result<String, String> {
        let mut why = Vec::new();
        for sentinel in self.sentinels() {
            match self.ask_one(sentinel).await {
                Ok(url) => return Ok(url),
                Err(e) => why.push(format!("{sentinel}: {e}")),
            }
        }
        Err(why.join("; "))
    }

    async fn ask_one(&self, sentinel: &str) -> Result<String, String> {
        let mut conn =
            self.with_sentinel(sentinel, |url| async move {
                redis::Client::open(url)?.get_multiplexed_async_connection().await
            })
            .await?;
        let addr: Option<(String, u16)> =
            timed(redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg(&self.name).query_async(&mut conn)).await?;
        let (host, port) = addr.ok_or_else(|| format!("knows no primary named {}", self.name))?;
        let url = self.primary(&host, port);
        let mut primary = connect(&url).await?;
        let role: Vec<redis::Value> = timed(redis::cmd("ROLE").query_async(&mut primary)).await?;
        match role.first() {
            Some(redis::Value::BulkString(r)) if r == b"master" => Ok(url),
            Some(redis::Value::SimpleString(r)) if r == "master" => Ok(url),
            _ => Err(format!("named {host}:{port}, which is not a primary (yet)")),
        }
    }
}

/// A connection of its own to `url`, within [`ASK_LIMIT`].
pub(super) async fn connect(url: &str) -> Result<MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    timed(client.get_multiplexed_async_connection()).await
}

async fn timed<T>(call: impl std::future::Future<Output = redis::RedisResult<T>>) -> Result<T, String> {
    match tokio::time::timeout(ASK_LIMIT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer in time".to_owned()),
    }
}

/// The new primary's `host port` in a `+switch-master` message about `name`
/// (`<name> <old ip> <old port> <new ip> <new port>`).
pub(super) fn switched_to(message: &str, name: &str) -> Option<(String, u16)> {
    let parts: Vec<&str> = message.split_whitespace().collect();
    match parts.as_slice() {
        [n, _, _, host, port] if *n == name => Some(((*host).to_owned(), port.parse().ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_url_forms() {
        let url = SentinelUrl::parse("redis+sentinel://:pw@a:1,b:2,c/prim").unwrap().unwrap();
        assert_eq!(url.sentinels().collect::<Vec<_>>(), ["a:1", "b:2", "c:26379"]);
        assert_eq!(url.sentinel("a:1", true), "redis://:pw@a:1");
        assert_eq!(url.sentinel("a:1", false), "redis://a:1");
        assert_eq!(url.name, "prim");
        assert_eq!(url.primary("10.0.0.1", 6380), "redis://:pw@10.0.0.1:6380");
        let tls = SentinelUrl::parse("rediss+sentinel://a:1/prim").unwrap().unwrap();
        assert_eq!(tls.primary("::1", 6380), "rediss://[::1]:6380");
        assert!(SentinelUrl::parse("redis://a:1").is_none());
        for bad in ["redis+sentinel://a:1", "redis+sentinel://a:1/", "redis+sentinel:///prim"] {
            let err = SentinelUrl::parse(bad).unwrap().unwrap_err().to_string();
            assert!(err.contains("MASTER_NAME"), "{bad}: {err}");
        }
    }

    #[test]
    fn reads_a_switch_master_message() {
        assert_eq!(switched_to("prim 127.0.0.1 1 127.0.0.1 2", "prim"), Some(("127.0.0.1".into(), 2)));
        assert_eq!(switched_to("other 127.0.0.1 1 127.0.0.1 2", "prim"), None);
        assert_eq!(switched_to("prim 1 2", "prim"), None);
    }
}
