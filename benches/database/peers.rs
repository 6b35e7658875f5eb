//! The peers: runlimit-postgres, rate-limiter-flexible (Node) and pgbench.

use super::*;

/// runlimit-postgres 0.3 `PostgresLimiter::check`, fixed window, limit
/// `MAX_LIMIT`, HMAC key per op, in a schema of its own (its tables and its
/// `_sqlx_migrations` stay out of the test database's public schema). Its
/// table is filled by counting every key once, 32 keys per `check_all`.
pub(crate) async fn runlimit_make(url: &str, keys: Arc<Vec<String>>) -> Result<MakeOp> {
    let mut c = sqlx::PgConnection::connect(url).await?;
    c.execute(format!("DROP SCHEMA IF EXISTS {RUNLIMIT_SCHEMA} CASCADE").as_str()).await?;
    c.execute(format!("CREATE SCHEMA {RUNLIMIT_SCHEMA}").as_str()).await?;
    let options: sqlx::postgres::PgConnectOptions = url.parse()?;
    let options = options.options([("search_path", RUNLIMIT_SCHEMA)]);
    let policy = runlimit_core::FixedWindowPolicy::new(
        runlimit_core::PolicyId::new("bench.requests")?,
        runlimit_core::ScopeId::new("client")?,
        runlimit_core::MAX_LIMIT,
        Duration::from_millis(u64::try_from(PREFILL_LIVE_MS)?),
    )?;
    let hasher = runlimit_core::KeyHasher::new(SECRET.as_bytes())?;
    let limiter = runlimit_postgres::PostgresLimiter::new(
        sqlx::postgres::PgPoolOptions::new().max_connections(8).connect_with(options.clone()).await?,
    );
    limiter.migrate().await?;
    let state = Arc::new((limiter, policy, hasher));
    let chunks: Vec<Vec<usize>> = (0..keys.len()).collect::<Vec<_>>().chunks(32).map(<[usize]>::to_vec).collect();
    let chunks = Arc::new(std::sync::Mutex::new(chunks));
    let fillers: Vec<_> = (0..8)
        .map(|_| {
            let (state, keys, chunks) = (state.clone(), keys.clone(), chunks.clone());
            tokio::spawn(async move {
                loop {
                    let Some(chunk) = chunks.lock().unwrap().pop() else { return Ok::<_, anyhow::Error>(()) };
                    let (limiter, policy, hasher) = &*state;
                    let checks: Vec<_> = chunk
                        .iter()
                        .map(|&i| runlimit_core::Check::new(policy, hasher.hash_for(policy, keys[i].as_bytes())))
                        .collect();
                    limiter.check_all(&checks).await?;
                }
            })
        })
        .collect();
    for f in fillers {
        f.await??;
    }
    state.0.pool().close().await;
    // Fresh statistics, as every other contender's table gets after its fill
    // (planned against the empty table, runlimit's statements scan it).
    for t in ["runlimit_fixed_windows", "runlimit_capacity_shards"] {
        c.execute(format!("VACUUM ANALYZE {RUNLIMIT_SCHEMA}.{t}").as_str()).await?;
    }
    let _ = c.execute("CHECKPOINT").await;
    let (policy, hasher) = (Arc::new(state.1.clone()), Arc::new(state.2.clone()));
    Ok(Arc::new(move |size| {
        let (options, policy, hasher, keys) = (options.clone(), policy.clone(), hasher.clone(), keys.clone());
        Box::pin(async move {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(size).connect_with(options).await?;
            let limiter = Arc::new(runlimit_postgres::PostgresLimiter::new(pool));
            let op: Op = Arc::new(move |i| {
                let (limiter, policy, hasher, keys) = (limiter.clone(), policy.clone(), hasher.clone(), keys.clone());
                Box::pin(async move {
                    let subject = hasher.hash_for(&*policy, keys[i].as_bytes());
                    let decision = limiter.check(&runlimit_core::Check::new(&*policy, subject)).await?;
                    if !decision.permits_request() {
                        bail!("runlimit refused a check");
                    }
                    Ok(())
                })
            });
            Ok(op)
        })
    }))
}

/// Starts `node bench/node/rlf.js --serve 1` in `processes` processes; the
/// first drops, creates and fills its table, the others count on it.
pub(crate) fn rlf(o: &Opts, db: &'static str, which: &str, url: &str, processes: usize) -> Result<Contender> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench").join("node");
    if !dir.join("node_modules").exists() {
        bail!("run `npm ci` in {} first (bash bench/database.sh does)", dir.display());
    }
    let pool = o.timing.callers.iter().max().copied().unwrap_or(1).div_ceil(processes).to_string();
    let commands = (0..processes)
        .map(|i| {
            let mut command = Command::new("node");
            command.current_dir(&dir).args([
                "rlf.js",
                "--db",
                which,
                "--url",
                url,
                "--callers",
                &pool,
                "--keys",
                &KEY_COUNT.to_string(),
                "--table",
                T_RLF,
                "--serve",
                "1",
                "--fill",
                if i == 0 { "1" } else { "0" },
            ]);
            command
        })
        .collect();
    let name = match (which, processes) {
        ("postgres", 1) => "rate-limiter-flexible `RateLimiterPostgres`",
        ("postgres", _) => RLF_THREE_PG,
        (_, 1) => "rate-limiter-flexible `RateLimiterMySQL`",
        _ => RLF_THREE_MY,
    };
    Ok(Contender { db, name: name.to_owned(), runner: Runner::Procs(Procs::start(commands)?) })
}

/// `pgbench -n -M prepared -c C -j min(C, 2) -T secs -f script`, after a run
/// of `warmup` seconds; answers its tps (without connection time) and failures.
pub(crate) fn pgbench(url: &str, script: &Path, callers: usize, warmup: f64, secs: f64) -> Result<(f64, u64)> {
    let run = |t: f64| -> Result<String> {
        let out = Command::new("pgbench")
            .args([
                "-n",
                "-M",
                "prepared",
                "-c",
                &callers.to_string(),
                "-j",
                &callers.min(2).to_string(),
                "-T",
                &format!("{}", t.ceil().max(1.0)),
                "-f",
            ])
            .arg(script)
            .arg(url)
            .output()
            .context("run pgbench")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!("pgbench failed: {}{}", String::from_utf8_lossy(&out.stderr), text);
        }
        Ok(text)
    };
    if warmup > 0.0 {
        run(warmup)?;
    }
    let text = run(secs)?;
    let tps = text
        .lines()
        .find(|l| l.starts_with("tps = ") && l.contains("without initial connection time"))
        .and_then(|l| l.split_whitespace().nth(2))
        .context(format!("no tps in pgbench output: {text}"))?
        .parse()?;
    let failed = text
        .lines()
        .find(|l| l.starts_with("number of failed transactions"))
        .and_then(|l| l.split(':').nth(1)?.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok((tps, failed))
}
