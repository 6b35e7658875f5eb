//! The contenders, in this process or as children: rate-limiter-flexible
//! (Node), limitador, and `redis-benchmark` INCR.

use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;

use anyhow::{bail, Context as _, Result};
use limit_store::{LimitStore, RedisStore};

use super::drive::{drive, How, Keys};
use super::stats::Probe;
use super::{Opts, KEY_COUNT};

/// How a contender runs one point.
pub(crate) enum Runner {
    /// In this process.
    /// `redis` is the store under `store`, which says how many round trips its updates took;
    /// `list`: the keys it counts, when not the bench's own; `probe`: its servers, with `--stats`.
    Store {
        store: Arc<dyn LimitStore>,
        redis: Arc<RedisStore>,
        keys: Keys,
        list: Option<Arc<Vec<String>>>,
        how: How,
        probe: Option<Probe>,
    },
    /// A child speaking rlf.js's `--serve 1` protocol: one stdin line "C WARMUP SECS", one JSON line back.
    Child { child: Child, out: BufReader<ChildStdout> },
    /// One `redis-benchmark` run per point.
    Incr,
}

pub(crate) struct Contender {
    pub(crate) name: &'static str,
    pub(crate) runner: Runner,
}

impl Contender {
    /// Starts `program args… --serve 1`, which fills its keys and says "ready".
    pub(crate) fn child(name: &'static str, dir: &Path, program: &str, args: &[&str]) -> Result<Contender> {
        let mut child = Command::new(program)
            .current_dir(dir)
            .args(args)
            .args(["--serve", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("run {program}"))?;
        let mut out = BufReader::new(child.stdout.take().context("child stdout")?);
        let mut line = String::new();
        out.read_line(&mut line)?;
        if line.trim() != "ready" {
            let _ = child.kill();
            bail!("{name} did not start: {line:?}");
        }
        Ok(Contender { name, runner: Runner::Child { child, out } })
    }

    pub(crate) async fn point(
        &mut self,
        keys: &Arc<Vec<String>>,
        c: usize,
        o: &Opts,
        last: Option<f64>,
    ) -> Result<(f64, u64)> {
        let name = self.name;
        match &mut self.runner {
            Runner::Store { store, redis, keys: which, list, how, probe } => {
                let before = redis.info().await?;
                let keys = list.as_ref().unwrap_or(keys);
                let (rate, errors, stats) =
                    drive(store.clone(), keys.clone(), which.clone(), how.clone(), c, o, probe.as_mut()).await;
                let after = redis.info().await?;
                let (one, two, more) = (
                    after.one_round_trip - before.one_round_trip,
                    after.two_round_trips - before.two_round_trips,
                    after.more_round_trips - before.more_round_trips,
                );
                let all = (one + two + more).max(1) as f64;
                eprintln!(
                    "  {name} C={c}: round trips per update: one {:.0}%, two {:.0}%, more {:.0}%",
                    100.0 * one as f64 / all,
                    100.0 * two as f64 / all,
                    100.0 * more as f64 / all
                );
                if let Some(stats) = stats {
                    eprintln!("  {name} C={c}: {stats}");
                }
                Ok((rate, errors))
            }
            Runner::Child { child, out } => {
                let stdin = child.stdin.as_mut().context("child stdin")?;
                writeln!(stdin, "{c} {} {}", o.timing.warmup, o.timing.secs)?;
                stdin.flush()?;
                let mut line = String::new();
                out.read_line(&mut line)?;
                let v: serde_json::Value =
                    serde_json::from_str(&line).context(format!("{} said {line:?}", self.name))?;
                let per_sec = v["counts"].as_f64().context("counts")? / v["secs"].as_f64().context("secs")?;
                Ok((per_sec, v["errors"].as_u64().unwrap_or(0)))
            }
            Runner::Incr => incr(&o.url, c, o.timing.secs, last),
        }
    }
}

impl Drop for Contender {
    fn drop(&mut self) {
        if let Runner::Child { child, .. } = &mut self.runner {
            drop(child.stdin.take()); // end of input: the child closes its connection and exits
            let _ = child.wait();
        }
    }
}

/// `redis-benchmark` INCR over 100,000 keys of the bench's own prefix, C
/// clients, no pipelining, sized from the last figure to last about `secs`.
pub(crate) fn incr(url: &str, c: usize, secs: f64, last: Option<f64>) -> Result<(f64, u64)> {
    let rest = url.strip_prefix("redis://").context("redis-benchmark needs a redis:// URL")?;
    let hostport = rest.rsplit('@').next().unwrap_or(rest).split('/').next().unwrap_or(rest);
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "6379"));
    let n = format!("{:.0}", (last.unwrap_or(20_000.0 * c.min(4) as f64) * secs).clamp(2_000.0, 1e9));
    let out = Command::new("redis-benchmark")
        .args(["-h", host, "-p", port, "-c", &c.to_string(), "-n", &n, "-P", "1"])
        .args(["-r", &KEY_COUNT.to_string(), "--csv", "INCR", "lsbench:incr:__rand_int__"])
        .output()
        .context("run redis-benchmark")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("redis-benchmark failed: {}{text}", String::from_utf8_lossy(&out.stderr));
    }
    // `"test","rps",…` then `"INCR lsbench:incr:__rand_int__","52631.58",…`
    let rps = text
        .lines()
        .find(|l| l.starts_with("\"INCR"))
        .and_then(|l| l.split(',').nth(1))
        .map(|f| f.trim_matches('"').parse::<f64>())
        .context(format!("no rps in redis-benchmark output: {text}"))??;
    Ok((rps, 0))
}
