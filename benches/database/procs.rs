//! Contenders that count in processes of their own, as the instances of a
//! site do: rate-limiter-flexible in Node, and this bench as a store
//! ([`StoreChild`]), one process or three counting the same keys at once.
//! Each process reads one point per stdin line `C WARMUP SECS` and answers
//! one JSON line `{"counts":N,"secs":S,"errors":E}`.

use std::io::{BufRead, BufReader, Write as _};
use std::process::{Child, ChildStdout, Stdio};

use super::*;

/// The processes of the three-instance contenders.
pub(crate) const PROCESSES: usize = 3;

/// Running processes, told their points together.
pub(crate) struct Procs(Vec<(Child, BufReader<ChildStdout>)>);

impl Procs {
    /// Starts `commands` one after the other, each once the one before
    /// said it is ready.
    pub(crate) fn start(commands: Vec<Command>) -> Result<Procs> {
        let mut procs = Procs(Vec::new());
        for mut command in commands {
            let mut child = command.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().context("start")?;
            let mut out = BufReader::new(child.stdout.take().context("stdout")?);
            let mut line = String::new();
            let read = out.read_line(&mut line);
            procs.0.push((child, out));
            read?;
            if line.trim() != "ready" {
                bail!("a process did not start: {line:?}");
            }
        }
        Ok(procs)
    }

    /// The callers of each process when `callers` count in all: split as
    /// evenly as may be, at least one each.
    pub(crate) fn split(&self, callers: usize) -> Vec<usize> {
        let n = self.0.len();
        (0..n).map(|i| (callers / n + usize::from(i < callers % n)).max(1)).collect()
    }

    /// One point, every process at once; their counts/s summed.
    pub(crate) fn point(&mut self, callers: usize, warmup: f64, secs: f64) -> Result<(f64, u64)> {
        let split = self.split(callers);
        for ((child, _), c) in self.0.iter_mut().zip(split) {
            let stdin = child.stdin.as_mut().context("stdin")?;
            writeln!(stdin, "{c} {warmup} {secs}")?;
            stdin.flush()?;
        }
        let (mut per_sec, mut errors) = (0.0, 0);
        for (_, out) in &mut self.0 {
            let mut line = String::new();
            out.read_line(&mut line)?;
            let v: serde_json::Value = serde_json::from_str(&line).context(format!("a process said {line:?}"))?;
            per_sec += v["counts"].as_f64().context("counts")? / v["secs"].as_f64().context("secs")?;
            errors += v["errors"].as_u64().unwrap_or(0);
        }
        Ok((per_sec, errors))
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (child, _) in &mut self.0 {
            drop(child.stdin.take()); // end of input: each closes its pool and exits
            let _ = child.wait();
        }
    }
}

/// This bench as one instance of a site (`--child-store URL TABLE`): for
/// each point, a new store with a pool of the point's callers, counting on
/// the bench's keys, as [`store_make`]'s contender does in the bench's own
/// process.
pub(crate) struct StoreChild {
    url: String,
    table: String,
}

impl StoreChild {
    /// The child's settings, when the bench was started as one.
    pub(crate) fn from_args() -> Option<StoreChild> {
        let args: Vec<String> = std::env::args().collect();
        let i = args.iter().position(|a| a == "--child-store")?;
        Some(StoreChild { url: args.get(i + 1)?.clone(), table: args.get(i + 2)?.clone() })
    }

    /// The command that starts one.
    pub(crate) fn command(url: &str, table: &str) -> Result<Command> {
        let mut command = Command::new(std::env::current_exe()?);
        command.args(["--child-store", url, table]);
        Ok(command)
    }

    /// Answers points until its input ends.
    pub(crate) fn serve(self) -> Result<()> {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
        rt.block_on(async {
            let keys = Arc::new(keys(KEY_COUNT));
            println!("ready");
            for line in std::io::stdin().lock().lines() {
                let line = line?;
                let mut it = line.split_whitespace();
                let callers: usize = it.next().context("callers")?.parse()?;
                let warmup: f64 = it.next().context("warmup")?.parse()?;
                let secs: f64 = it.next().context("secs")?.parse()?;
                // A store that cannot connect (the server is full, or down
                // for another suite's outage test) fails this point only.
                let (per_sec, errors) = match store(&self.url, &self.table, u32::try_from(callers)?, 2 * SIZE_BIG).await
                {
                    Ok(s) => drive(store_op(s, keys.clone()), KEY_COUNT, callers, warmup, secs).await,
                    Err(e) => {
                        eprintln!("  error: {e:#}");
                        (0.0, 1)
                    }
                };
                println!("{}", serde_json::json!({ "counts": per_sec * secs, "secs": secs, "errors": errors }));
            }
            Ok(())
        })
    }
}

/// Three processes of this bench counting on `table` at once.
pub(crate) fn store_three(db: &'static str, url: &str, table: &str) -> Result<Contender> {
    let commands = (0..PROCESSES).map(|_| StoreChild::command(url, table)).collect::<Result<_>>()?;
    Ok(Contender { db, name: STORE_THREE.into(), runner: Runner::Procs(Procs::start(commands)?) })
}
