//! `--stats`: where a store point's counts go, per count measured. The
//! servers' script calls and their time (`INFO commandstats`' `EVALSHA`,
//! the commands a script calls within), the primaries' and the replicas' CPU
//! (`INFO cpu`, `used_cpu_sys` + `used_cpu_user`), and this process's CPU
//! (`/proc/self/stat`, so Linux only). Deltas over the measured part, so no
//! `CONFIG RESETSTAT`; on a server others use, their work is counted too.

use anyhow::{Context as _, Result};
use redis::aio::MultiplexedConnection;

/// Connections to the servers a store talks to: a cluster's nodes, or one
/// server and its replicas.
pub(crate) struct Probe {
    primaries: Vec<MultiplexedConnection>,
    replicas: Vec<MultiplexedConnection>,
}

/// The totals at one moment.
#[derive(Default)]
pub(crate) struct Snap {
    calls: u64,
    usec: u64,
    primaries: f64,
    replicas: f64,
    own: f64,
}

impl Probe {
    /// The servers behind `url`: a `redis+cluster://` URL's nodes by
    /// `CLUSTER NODES` on its first seed; else the server and the replicas
    /// its `INFO replication` lists.
    pub(crate) async fn new(url: &str) -> Result<Probe> {
        let (scheme, rest) = url.split_once("://").context("a URL")?;
        let (auth, hosts) = rest.rsplit_once('@').map_or(("", rest), |(a, h)| (a, h));
        let at = if auth.is_empty() { String::new() } else { format!("{auth}@") };
        let open = |hostport: &str| {
            let url = format!("redis://{at}{hostport}");
            async move { Ok::<_, anyhow::Error>(redis::Client::open(url)?.get_multiplexed_async_connection().await?) }
        };
        let seed = hosts.split([',', '/']).next().unwrap_or(hosts);
        let mut first = open(seed).await?;
        let (mut primaries, mut replicas) = (Vec::new(), Vec::new());
        if scheme.contains("cluster") {
            let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut first).await?;
            for line in nodes.lines() {
                let f: Vec<&str> = line.split(' ').collect();
                let (Some(addr), Some(flags)) = (f.get(1), f.get(2)) else { continue };
                let conn = open(addr.split('@').next().unwrap_or(addr)).await?;
                if flags.contains("master") {
                    primaries.push(conn)
                } else {
                    replicas.push(conn)
                }
            }
        } else {
            let info: String = redis::cmd("INFO").arg("replication").query_async(&mut first).await?;
            for line in info.lines().filter(|l| l.starts_with("slave") && l.contains("ip=")) {
                let field = |k: &str| line.split([':', ',']).find_map(|p| p.strip_prefix(k)).unwrap_or("");
                replicas.push(open(&format!("{}:{}", field("ip="), field("port="))).await?);
            }
            primaries.push(first);
        }
        Ok(Probe { primaries, replicas })
    }

    /// The servers' and this process's totals now.
    pub(crate) async fn snap(&mut self) -> Result<Snap> {
        let mut s = Snap { own: own_cpu()?, ..Snap::default() };
        let primaries = self.primaries.len();
        for (i, conn) in self.primaries.iter_mut().chain(self.replicas.iter_mut()).enumerate() {
            let info: String = redis::cmd("INFO").arg("cpu").arg("commandstats").query_async(conn).await?;
            let cpu: f64 = ["used_cpu_sys:", "used_cpu_user:"]
                .iter()
                .filter_map(|k| info.lines().find_map(|l| l.strip_prefix(k)))
                .map(|v| v.trim().parse::<f64>().unwrap_or(0.0))
                .sum();
            if i >= primaries {
                s.replicas += cpu;
                continue;
            }
            s.primaries += cpu;
            if let Some(fields) = info.lines().find_map(|l| l.strip_prefix("cmdstat_evalsha:")) {
                let field = |k: &str| fields.split(',').find_map(|p| p.strip_prefix(k)?.parse::<u64>().ok());
                s.calls += field("calls=").unwrap_or(0);
                s.usec += field("usec=").unwrap_or(0);
            }
        }
        Ok(s)
    }
}

/// Per count over `counts` between `a` and `b`, as one line.
pub(crate) fn per_count(a: &Snap, b: &Snap, counts: u64) -> String {
    let n = counts.max(1) as f64;
    let calls = b.calls.saturating_sub(a.calls);
    format!(
        "counts per EVALSHA {:.2}, EVALSHA {:.1} µs, primaries' CPU {:.1} µs, \
         replicas' {:.1} µs, this process's {:.1} µs (per count, {counts} counts)",
        counts as f64 / calls.max(1) as f64,
        b.usec.saturating_sub(a.usec) as f64 / n,
        (b.primaries - a.primaries) * 1e6 / n,
        (b.replicas - a.replicas) * 1e6 / n,
        (b.own - a.own) * 1e6 / n,
    )
}

/// This process's user and system CPU, in seconds (clock ticks of 1/100 s).
fn own_cpu() -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("/proc/self/stat")?;
    // After the command's `(name)`: state is field 3, utime 14, stime 15.
    let f: Vec<&str> = stat.rsplit_once(')').context("stat")?.1.split_whitespace().collect();
    Ok((f[11].parse::<u64>()? + f[12].parse::<u64>()?) as f64 / 100.0)
}
