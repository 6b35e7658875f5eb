//! One database's points: its contenders side by side, round after round.

use super::*;

pub(crate) const STORE: &str = "limit-store `DatabaseStore`";
/// A new store per point: it remembers only the rows of its own point.
/// SQLite's counts on the caller's thread.
/// Counts with an `apply` the store may keep (`update_owned`), as `Limits` counts.
pub(crate) const OWNED: &str = "limit-store, `update_owned` (as `Limits` counts)";
pub(crate) const STORE_NEW: &str = "limit-store, a new store per point";
/// Three processes, each a new store per point, counting the same keys at once.
pub(crate) const STORE_THREE: &str = "limit-store, three processes";
pub(crate) const RLF_THREE_PG: &str = "rate-limiter-flexible `RateLimiterPostgres`, three processes";
pub(crate) const RLF_THREE_MY: &str = "rate-limiter-flexible `RateLimiterMySQL`, three processes";
/// The aim's pairs (issue 15): a store that has not seen the rows it counts
/// against rate-limiter-flexible, in one process and in three.
pub(crate) const FRESH_PAIRS: [(&str, &str, &str); 4] = [
    (STORE_NEW, "rate-limiter-flexible `RateLimiterPostgres`", "PostgreSQL"),
    (STORE_THREE, RLF_THREE_PG, "PostgreSQL"),
    (STORE_NEW, "rate-limiter-flexible `RateLimiterMySQL`", "MariaDB"),
    (STORE_THREE, RLF_THREE_MY, "MariaDB"),
];
/// The optimistic shape on one connection per count, without sqlx's ping on
/// every acquire: what the store's optimistic path could cost.
pub(crate) const LEAN: &str = "raw sqlx loop, optimistic shape, one acquire, no ping";

pub(crate) async fn run_sqlite(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let path = o.dir.join("bench.sqlite");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let url = format!("sqlite://{}?mode=rwc", path.display());
    eprintln!("SQLite ({})", path.display());
    prepare_store_table(&url, T_STORE, keys).await?;
    fresh_table(&url, T_RAW).await?;
    let hashes = Arc::new(raw_hashes());
    prefill(&url, T_RAW, &hashes, 1).await?;
    let (u, h) = (url.clone(), hashes.clone());
    let raw: MakeOp = Arc::new(move |size| {
        let (u, h) = (u.clone(), h.clone());
        Box::pin(async move {
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(size)
                .connect_with(
                    u.parse::<sqlx::sqlite::SqliteConnectOptions>()?
                        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
                        .busy_timeout(Duration::from_millis(1_500)),
                )
                .await?;
            let op: Op = Arc::new(move |i| {
                let (pool, h) = (pool.clone(), h.clone());
                Box::pin(async move { lite_sqlx(&pool, &h[i]).await })
            });
            Ok(op)
        })
    });
    let mut contenders = vec![
        op_contender("SQLite", STORE, KEY_COUNT, store_for_run(&url, T_STORE, keys.clone(), false)),
        op_contender("SQLite", OWNED, KEY_COUNT, store_for_run(&url, T_STORE, keys.clone(), true)),
        op_contender("SQLite", "raw sqlx loop, same transaction", KEY_COUNT, raw),
        Contender {
            db: "SQLite",
            name: "raw rusqlite loop, same transaction".into(),
            runner: Runner::Rusqlite { path, table: T_RAW, hashes },
        },
    ];
    res.rounds(o, &mut contenders, &o.timing.callers).await;
    Ok(())
}

/// Raw sqlx loops of both shapes on the shared raw table, each point on a
/// pool of its own; `locked` or optimistic.
pub(crate) fn pg_raw(url: &str, optimistic: bool, lean: bool) -> MakeOp {
    let url = url.to_owned();
    let hashes = Arc::new(raw_hashes());
    Arc::new(move |size| {
        let (url, h) = (url.clone(), hashes.clone());
        Box::pin(async move {
            // `lean`: no ping on every acquire (sqlx's default), both statements on one connection.
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(!lean)
                .connect(&url)
                .await?;
            let op: Op = Arc::new(move |i| {
                let (p, h) = (pool.clone(), h.clone());
                Box::pin(async move {
                    if optimistic {
                        pg_optimistic(&p, &h[i], lean).await
                    } else {
                        pg_locked(&p, &h[i]).await
                    }
                })
            });
            Ok(op)
        })
    })
}

pub(crate) fn my_raw(url: &str, optimistic: bool, lean: bool) -> MakeOp {
    let url = url.to_owned();
    let hashes = Arc::new(raw_hashes());
    Arc::new(move |size| {
        let (url, h) = (url.clone(), hashes.clone());
        Box::pin(async move {
            // The store's session settings: READ COMMITTED, 1 s lock wait.
            let pool = sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(size)
                .test_before_acquire(!lean)
                .after_connect(|conn, _| {
                    Box::pin(async move {
                        conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                        conn.execute("SET SESSION innodb_lock_wait_timeout = 1").await?;
                        Ok(())
                    })
                })
                .connect(&url)
                .await?;
            let op: Op = Arc::new(move |i| {
                let (p, h) = (pool.clone(), h.clone());
                Box::pin(async move {
                    if optimistic {
                        my_optimistic(&p, &h[i], lean).await
                    } else {
                        my_locked(&p, &h[i]).await
                    }
                })
            });
            Ok(op)
        })
    })
}

/// The store's three contenders on `db` (PostgreSQL or MariaDB): one store
/// for the run, a new store per point, and three processes, each on a table
/// of its own that holds a live row for every key.
async fn store_contenders(db: &'static str, url: &str, keys: &Arc<Vec<String>>) -> Result<Vec<Contender>> {
    for table in [T_STORE, T_STORE_NEW, T_STORE_THREE] {
        prepare_store_table(url, table, keys).await?;
    }
    Ok(vec![
        op_contender(db, STORE, KEY_COUNT, store_for_run(url, T_STORE, keys.clone(), false)),
        op_contender(db, STORE_NEW, KEY_COUNT, store_make(url, T_STORE_NEW, keys.clone())),
        store_three(db, url, T_STORE_THREE)?,
    ])
}

/// rate-limiter-flexible on `db` (`which`: its dialect) in one process and in
/// three; one that can't start is said and left out.
fn rlf_contenders(o: &Opts, db: &'static str, which: &str, url: &str, contenders: &mut Vec<Contender>) {
    for processes in [1, PROCESSES] {
        match rlf(o, db, which, url, processes) {
            Ok(k) => contenders.push(k),
            Err(e) => eprintln!("  rate-limiter-flexible: {e:#}"),
        }
    }
}

pub(crate) async fn run_postgres(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let url = &o.pg;
    eprintln!("PostgreSQL ({url})");
    let mut contenders = store_contenders("PostgreSQL", url, keys).await?;
    if o.raw {
        // The raw loops and pgbench count on one table of the store's schema.
        fresh_table(url, T_RAW).await?;
        prefill(url, T_RAW, &raw_hashes(), 1).await?;
        contenders.extend([
            op_contender("PostgreSQL", "raw sqlx loop, locked shape", KEY_COUNT, pg_raw(url, false, false)),
            op_contender("PostgreSQL", "raw sqlx loop, optimistic shape", KEY_COUNT, pg_raw(url, true, false)),
            op_contender("PostgreSQL", LEAN, KEY_COUNT, pg_raw(url, true, true)),
        ]);
    } else if o.pgbench {
        fresh_table(url, T_RAW).await?;
        prefill(url, T_RAW, &raw_hashes(), 1).await?;
    }
    if o.pgbench {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench").join("pgbench");
        for (name, script) in [
            ("pgbench, locked shape", "locked.sql"),
            ("pgbench, optimistic shape", "optimistic.sql"),
            ("pgbench, one-statement shape", "one.sql"),
        ] {
            contenders.push(Contender {
                db: "PostgreSQL",
                name: name.into(),
                runner: Runner::Pgbench { url: url.clone(), script: dir.join(script) },
            });
        }
    }
    if o.runlimit {
        eprintln!("  filling runlimit's table (100,000 keys, 32 per check_all)");
        match runlimit_make(url, keys.clone()).await {
            Ok(make) => contenders.push(op_contender("PostgreSQL", "runlimit-postgres 0.3 `check`", KEY_COUNT, make)),
            Err(e) => eprintln!("  runlimit-postgres: {e:#}"),
        }
    }
    if o.node {
        rlf_contenders(o, "PostgreSQL", "postgres", url, &mut contenders);
    }
    res.rounds(o, &mut contenders, &o.timing.callers).await;
    Ok(())
}

pub(crate) async fn run_mysql(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let url = &o.my;
    eprintln!("MariaDB/MySQL ({url})");
    let mut contenders = store_contenders("MariaDB", url, keys).await?;
    if o.raw {
        fresh_table(url, T_RAW).await?;
        prefill(url, T_RAW, &raw_hashes(), 1).await?;
        contenders.extend([
            op_contender("MariaDB", "raw sqlx loop, locked shape", KEY_COUNT, my_raw(url, false, false)),
            op_contender("MariaDB", "raw sqlx loop, optimistic shape", KEY_COUNT, my_raw(url, true, false)),
            op_contender("MariaDB", LEAN, KEY_COUNT, my_raw(url, true, true)),
        ]);
    }
    if o.node {
        rlf_contenders(o, "MariaDB", "mysql", url, &mut contenders);
    }
    res.rounds(o, &mut contenders, &o.timing.callers).await;
    Ok(())
}

/// Fills `table` with live rows of `generation` until it holds `total` rows.
pub(crate) async fn fill_to(url: &str, table: &str, generation: i64, total: u64) -> Result<()> {
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut c).await?;
        sqlx::query(&format!(
            "INSERT INTO {table} (key_hash, generation, value, expires_at) \
             SELECT sha256(('fill' || i)::text::bytea), $1, '1', {PG_NOW} + {PREFILL_LIVE_MS} \
             FROM generate_series(1, $2::int8) AS i ON CONFLICT DO NOTHING"
        ))
        .bind(generation)
        .bind(i64::try_from(total)? - have)
        .execute(&mut c)
        .await?;
        c.execute(format!("VACUUM ANALYZE {table}").as_str()).await?;
        let _ = c.execute("CHECKPOINT").await;
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&mut c).await?;
        let want = i64::try_from(total)? - have;
        let mut from = 1_i64;
        while from <= want {
            let to = (from + 99_999).min(want);
            sqlx::query(&format!(
                "INSERT IGNORE INTO {table} (key_hash, generation, value, expires_at) \
                 SELECT UNHEX(SHA2(CONCAT('fill', seq), 256)), ?, '1', {MY_NOW} + {PREFILL_LIVE_MS} \
                 FROM seq_{from}_to_{to}"
            ))
            .bind(generation)
            .execute(&mut c)
            .await?;
            from = to + 1;
        }
        c.execute(format!("ANALYZE TABLE {table}").as_str()).await?;
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        let have: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {table}")).fetch_one(&mut c).await?;
        sqlx::query(&format!(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < ?) \
             INSERT OR IGNORE INTO {table} (key_hash, generation, value, expires_at) \
             SELECT randomblob(32), ?, '1', {LITE_NOW} + {PREFILL_LIVE_MS} FROM s"
        ))
        .bind(i64::try_from(total)? - have)
        .bind(generation)
        .execute(&mut c)
        .await?;
    }
    Ok(())
}

pub(crate) const SIZE_SMALL: &str = "size: table at 10,000 rows";
pub(crate) const SIZE_LARGE: &str = "size: table at 1,000,000 rows";
pub(crate) const SIZE_RAW_SMALL: &str = "size, raw rusqlite loop: table at 10,000 rows";
pub(crate) const SIZE_RAW_LARGE: &str = "size, raw rusqlite loop: table at 1,000,000 rows";

/// limit-store over the same 10,000 keys on two tables: one holding just
/// those 10,000 rows, one holding 990,000 more (live, of the store's
/// generation, so the bound counts them; `max_entries` 2,000,000 so that it
/// never fills). The two alternate, round by round.
pub(crate) async fn run_size(o: &Opts, res: &mut Results, keys: &Arc<Vec<String>>) -> Result<()> {
    let small: Arc<Vec<String>> = Arc::new(keys[..SIZE_KEYS].to_vec());
    let lite = format!("sqlite://{}?mode=rwc", o.dir.join("bench.sqlite").display());
    let any = ["sqlite", "postgres", "mysql"].iter().any(|d| o.wants(d));
    let dbs: [(&'static str, &str, String, usize); 3] = [
        ("SQLite", "sqlite", lite, 1),
        ("PostgreSQL", "postgres", o.pg.clone(), 8),
        ("MariaDB", "mysql", o.my.clone(), 8),
    ];
    for (db, flag, url, callers) in dbs {
        if any && !o.wants(flag) {
            continue;
        }
        eprintln!("Size: {db}");
        prepare_store_table(&url, T_SIZE_S, &small).await?;
        let generation = prepare_store_table(&url, T_SIZE_L, &small).await?;
        fill_to(&url, T_SIZE_L, generation, SIZE_BIG).await?;
        let check = store(&url, T_SIZE_L, 1, 2 * SIZE_BIG).await?;
        eprintln!("  live entries in the large table: {}", check.info().await?.live_entries);
        drop(check);
        let mut contenders = vec![
            op_contender(db, SIZE_SMALL, SIZE_KEYS, store_make(&url, T_SIZE_S, small.clone())),
            op_contender(db, SIZE_LARGE, SIZE_KEYS, store_make(&url, T_SIZE_L, small.clone())),
        ];
        if flag == "sqlite" {
            // The control: SQLite's own cost of a larger table, the same
            // transaction with no store around it, on tables of both sizes.
            let hashes: Arc<Vec<[u8; 32]>> = Arc::new(raw_hashes()[..SIZE_KEYS].to_vec());
            for table in [T_SIZE_RAW_S, T_SIZE_RAW_L] {
                fresh_table(&url, table).await?;
                prefill(&url, table, &hashes, 1).await?;
            }
            fill_to(&url, T_SIZE_RAW_L, 1, SIZE_BIG).await?;
            let path = o.dir.join("bench.sqlite");
            for (name, table) in [(SIZE_RAW_SMALL, T_SIZE_RAW_S), (SIZE_RAW_LARGE, T_SIZE_RAW_L)] {
                let runner = Runner::Rusqlite { path: path.clone(), table, hashes: hashes.clone() };
                contenders.push(Contender { db, name: name.into(), runner });
            }
        }
        res.rounds(o, &mut contenders, &[callers]).await;
        for table in [T_SIZE_L, T_SIZE_RAW_L] {
            fresh_table(&url, table).await?; // leave the server small
        }
    }
    Ok(())
}
