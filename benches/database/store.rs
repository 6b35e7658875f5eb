//! The contenders of limit-store: one long-lived store for the run, a new store per point, and the tables they count in.

use super::*;

/// The fixed-window count: read `n` (a bare JSON number), write `n + 1` with
/// the entry's expiry, or 1 with a new 60 s window.
pub(crate) fn count(current: &[Option<Entry>], now: Millis) -> (Vec<Write>, u64) {
    let (n, expires_at) = match &current[0] {
        Some(e) => (e.value.as_u64().unwrap_or(0), e.expires_at),
        None => (0, now + WINDOW_MS),
    };
    (vec![Write::Put(Entry { value: (n + 1).into(), expires_at })], n + 1)
}

/// Whether limit-store's commits wait for the disk in this run, as
/// rate-limiter-flexible's do (`LIMIT_STORE_BENCH_DURABLE=1`; off by default,
/// as the store's own default is): see `DatabaseStoreBuilder::durable_commits`.
/// The processes of a three-process point inherit it.
pub(crate) fn durable() -> bool {
    std::env::var("LIMIT_STORE_BENCH_DURABLE").is_ok_and(|v| v == "1")
}

pub(crate) async fn store(url: &str, table: &str, pool: u32, max_entries: u64) -> Result<DatabaseStore> {
    Ok(DatabaseStore::builder(url)
        .table(table)
        .secret(SECRET)
        .max_connections(pool)
        .max_entries(max_entries)
        .sweep_every(None)
        .durable_commits(durable())
        .connect()
        .await?)
}

pub(crate) fn store_op(s: DatabaseStore, keys: Arc<Vec<String>>) -> Op {
    Arc::new(move |i| {
        let (s, keys) = (s.clone(), keys.clone());
        Box::pin(async move {
            update_with(&s, &[keys[i].as_str()], count).await?;
            Ok(())
        })
    })
}

/// [`store_op`] through `update_owned`, with an `apply` the store may keep,
/// as `Limits` counts (SQLite's writer then runs it itself).
pub(crate) fn store_op_owned(s: DatabaseStore, keys: Arc<Vec<String>>) -> Op {
    Arc::new(move |i| {
        let (s, keys) = (s.clone(), keys.clone());
        Box::pin(async move {
            s.update_owned(&[keys[i].as_str()], Box::new(|current, now| count(current, now).0)).await?;
            Ok(())
        })
    })
}

/// One store on `table` for the whole run, as an app keeps one: its pool has
/// room for the most callers, and it remembers the rows it counted across
/// points. Before the first point it counts every key once, untimed, as an
/// app that has run for a while has; before each point it says how its
/// counts went so far.
/// With `owned`, its counts go through [`store_op_owned`].
pub(crate) fn store_for_run(url: &str, table: &'static str, keys: Arc<Vec<String>>, owned: bool) -> MakeOp {
    let url = url.to_owned();
    let once = Arc::new(tokio::sync::OnceCell::new());
    Arc::new(move |_| {
        let (url, keys, once) = (url.clone(), keys.clone(), once.clone());
        Box::pin(async move {
            let s: &DatabaseStore = once
                .get_or_try_init(|| async {
                    let s = store(&url, table, 32, 2 * SIZE_BIG).await?;
                    let next = Arc::new(AtomicUsize::new(0));
                    let tasks: Vec<_> = (0..32)
                        .map(|_| {
                            let (s, keys, next) = (s.clone(), keys.clone(), next.clone());
                            tokio::spawn(async move {
                                loop {
                                    let i = next.fetch_add(1, Ordering::Relaxed);
                                    let Some(key) = keys.get(i) else { return Ok::<_, anyhow::Error>(()) };
                                    update_with(&s, &[key.as_str()], count).await?;
                                }
                            })
                        })
                        .collect();
                    for t in tasks {
                        t.await??;
                    }
                    Ok::<_, anyhow::Error>(s)
                })
                .await?;
            let p = s.info().await?;
            eprintln!(
                "    (the store's counts so far: {} in one statement, {} read then written, {} locked; {} batched)",
                p.one_statement, p.read_then_write, p.locked, p.batched
            );
            Ok(if owned { store_op_owned(s.clone(), keys) } else { store_op(s.clone(), keys) })
        })
    })
}

/// A store on `table` per point, with a pool of the point's size.
pub(crate) fn store_make(url: &str, table: &'static str, keys: Arc<Vec<String>>) -> MakeOp {
    let url = url.to_owned();
    Arc::new(move |pool| {
        let (url, keys) = (url.clone(), keys.clone());
        Box::pin(async move { Ok(store_op(store(&url, table, pool, 2 * SIZE_BIG).await?, keys)) })
    })
}

/// Drops `table` (and its migration log) and creates it again through the
/// store's own migration.
pub(crate) async fn fresh_table(url: &str, table: &str) -> Result<()> {
    let drop = [format!("DROP TABLE IF EXISTS {table}"), format!("DROP TABLE IF EXISTS {table}_migrations")];
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        for d in &drop {
            c.execute(d.as_str()).await?;
        }
    }
    DatabaseStore::builder(url).table(table).migrate().await?;
    Ok(())
}

/// Inserts a live row (value `1`, an hour to live on the database's clock)
/// for each hash, in batches.
pub(crate) async fn prefill(url: &str, table: &str, hashes: &[[u8; 32]], generation: i64) -> Result<()> {
    if url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(url).await?;
        for chunk in hashes.chunks(10_000) {
            let ks: Vec<Vec<u8>> = chunk.iter().map(|h| h.to_vec()).collect();
            sqlx::query(&format!(
                "INSERT INTO {table} (key_hash, generation, value, expires_at) \
                 SELECT k, $2, '1', {PG_NOW} + {PREFILL_LIVE_MS} FROM unnest($1::bytea[]) AS k \
                 ON CONFLICT DO NOTHING"
            ))
            .bind(ks)
            .bind(generation)
            .execute(&mut c)
            .await?;
        }
        c.execute(format!("VACUUM ANALYZE {table}").as_str()).await?;
        // Start every contender right after a checkpoint, so none pays more
        // full-page writes than another for the fill (needs superuser; skipped without).
        let _ = c.execute("CHECKPOINT").await;
    } else if url.starts_with("mysql") {
        let mut c = sqlx::MySqlConnection::connect(url).await?;
        for chunk in hashes.chunks(2_000) {
            let rows = vec![format!("(?, ?, '1', {MY_NOW} + {PREFILL_LIVE_MS})"); chunk.len()].join(", ");
            let sql = format!("INSERT IGNORE INTO {table} (key_hash, generation, value, expires_at) VALUES {rows}");
            let mut q = sqlx::query(&sql);
            for h in chunk {
                q = q.bind(&h[..]).bind(generation);
            }
            q.execute(&mut c).await?;
        }
        c.execute(format!("ANALYZE TABLE {table}").as_str()).await?;
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await?;
        let mut tx = c.begin().await?;
        let sql = format!(
            "INSERT OR IGNORE INTO {table} (key_hash, generation, value, expires_at) \
             VALUES (?, ?, '1', {LITE_NOW} + {PREFILL_LIVE_MS})"
        );
        for h in hashes {
            sqlx::query(&sql).bind(&h[..]).bind(generation).execute(&mut *tx).await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// Fresh `table` with a live row for each of `keys` under the bench's secret.
pub(crate) async fn prepare_store_table(url: &str, table: &str, keys: &[String]) -> Result<i64> {
    fresh_table(url, table).await?;
    // The secret's generation as the store records it; a row is named by
    // HMAC-SHA-256 of its key under the secret (SPEC §5).
    let generation = store(url, table, 1, 1_000_000).await?.info().await?.generation;
    let mac = <hmac::Hmac<sha2::Sha256> as hmac::Mac>::new_from_slice(SECRET.as_bytes())?;
    let hashes: Vec<[u8; 32]> =
        keys.iter().map(|k| hmac::Mac::finalize(hmac::Mac::chain_update(mac.clone(), k)).into_bytes().into()).collect();
    prefill(url, table, &hashes, generation).await?;
    Ok(generation)
}
