//! The raw loops: the store's SQL with no store around it, on sqlx and on rusqlite.

use super::*;

/// The count the raw loops compute: `n + 1` over the row's value, keeping a
/// live expiry or opening a new window.
pub(crate) fn next_value(value: Option<&str>, expires_at: i64, now: i64) -> (String, i64) {
    if expires_at > now {
        let n: u64 = value.and_then(|v| v.parse().ok()).unwrap_or(0);
        ((n + 1).to_string(), expires_at)
    } else {
        ("1".to_owned(), now + WINDOW_MS)
    }
}

/// PostgreSQL, the locked shape of `postgres.rs`: BEGIN; lock-or-create the
/// row with `INSERT … ON CONFLICT DO UPDATE … RETURNING` (with the clock);
/// write with the `WITH … UPDATE … DELETE` statement; COMMIT.
pub(crate) async fn pg_locked(pool: &sqlx::PgPool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin().await?;
    let rows = sqlx::query(&format!(
        "INSERT INTO {t} (key_hash, generation, value, expires_at) \
         SELECT k, 0, 'null', 0 FROM unnest($1::bytea[]) AS k ORDER BY k \
         ON CONFLICT (key_hash) DO UPDATE SET value = {t}.value \
         RETURNING key_hash, generation, value, expires_at, {PG_NOW} AS now"
    ))
    .bind(vec![key.to_vec()])
    .fetch_all(&mut *tx)
    .await?;
    let row = rows.first().context("no row")?;
    let now: i64 = row.try_get("now")?;
    let value: String = row.try_get("value")?;
    let (v, e) = next_value(Some(&value), row.try_get("expires_at")?, now);
    sqlx::query(&format!(
        "WITH w(k, v, e) AS (SELECT * FROM unnest($1::bytea[], $2::text[], $3::int8[])), \
         up AS (UPDATE {t} SET generation = $4, value = w.v, expires_at = w.e FROM w \
                WHERE {t}.key_hash = w.k RETURNING 1), \
         del AS (DELETE FROM {t} WHERE key_hash = ANY($5::bytea[]) RETURNING 1) \
         SELECT (SELECT count(*) FROM up) + (SELECT count(*) FROM del)"
    ))
    .bind(vec![key.to_vec()])
    .bind(vec![v])
    .bind(vec![e])
    .bind(1_i64)
    .bind(Vec::<Vec<u8>>::new())
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// PostgreSQL, the optimistic shape: one autocommit read with the clock, one
/// conditional autocommit write; the locked shape when the row changed.
pub(crate) async fn pg_optimistic(pool: &sqlx::PgPool, key: &[u8; 32], one_conn: bool) -> Result<()> {
    let t = T_RAW;
    // `one_conn`: both statements on one connection, acquired once.
    let mut held = if one_conn { Some(pool.acquire().await?) } else { None };
    let read_sql = format!(
        "SELECT {PG_NOW} AS now, t.generation, t.value, t.expires_at \
         FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash = ANY($1::bytea[])"
    );
    let row = sqlx::query(&read_sql).bind(vec![key.to_vec()]);
    let row = match &mut held {
        Some(c) => row.fetch_one(&mut **c).await?,
        None => row.fetch_one(pool).await?,
    };
    let now: i64 = row.try_get("now")?;
    let old_v: Option<String> = row.try_get("value")?;
    let (Some(old_v), Some(old_g), Some(old_e)) =
        (old_v, row.try_get::<Option<i64>, _>("generation")?, row.try_get::<Option<i64>, _>("expires_at")?)
    else {
        return pg_locked(pool, key).await;
    };
    let (v, e) = next_value(Some(&old_v), old_e, now);
    let write_sql = format!(
        "UPDATE {t} SET generation = $2, value = $3, expires_at = $4 \
         WHERE key_hash = $1 AND generation = $5 AND value = $6 AND expires_at = $7"
    );
    let done = sqlx::query(&write_sql).bind(&key[..]).bind(1_i64).bind(v).bind(e).bind(old_g).bind(old_v).bind(old_e);
    let done = match &mut held {
        Some(c) => done.execute(&mut **c).await?,
        None => done.execute(pool).await?,
    };
    drop(held);
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        pg_locked(pool, key).await
    }
}

/// MySQL/MariaDB, the locked shape of `mysql.rs`: BEGIN; `INSERT … ON
/// DUPLICATE KEY UPDATE` to lock or create; SELECT the row with the clock;
/// UPDATE; COMMIT (READ COMMITTED, as the store sets).
pub(crate) async fn my_locked(pool: &sqlx::MySqlPool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin().await?;
    sqlx::query(&format!(
        "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, 0, 'null', 0) \
         ON DUPLICATE KEY UPDATE value = value"
    ))
    .bind(&key[..])
    .execute(&mut *tx)
    .await?;
    let row = sqlx::query(&format!(
        "SELECT key_hash, generation, CAST(value AS CHAR) AS value, expires_at, {MY_NOW} AS now FROM {t} \
         WHERE key_hash IN (?)"
    ))
    .bind(&key[..])
    .fetch_one(&mut *tx)
    .await?;
    let value: String = row.try_get("value")?;
    let (v, e) = next_value(Some(&value), row.try_get("expires_at")?, row.try_get("now")?);
    sqlx::query(&format!("UPDATE {t} SET generation = ?, value = ?, expires_at = ? WHERE key_hash = ?"))
        .bind(1_i64)
        .bind(v)
        .bind(e)
        .bind(&key[..])
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// MySQL/MariaDB, the optimistic shape: autocommit read with the clock, then a
/// conditional UPDATE; the locked shape when it matched nothing.
pub(crate) async fn my_optimistic(pool: &sqlx::MySqlPool, key: &[u8; 32], one_conn: bool) -> Result<()> {
    let t = T_RAW;
    let mut held = if one_conn { Some(pool.acquire().await?) } else { None };
    let read_sql = format!(
        "SELECT {MY_NOW} AS now, t.key_hash, t.generation, CAST(t.value AS CHAR) AS value, t.expires_at \
         FROM (SELECT 1 AS one) AS d LEFT JOIN {t} AS t ON t.key_hash IN (?)"
    );
    let row = sqlx::query(&read_sql).bind(&key[..]);
    let row = match &mut held {
        Some(c) => row.fetch_one(&mut **c).await?,
        None => row.fetch_one(pool).await?,
    };
    let now: i64 = row.try_get("now")?;
    let (Some(old_v), Some(old_g), Some(old_e)) = (
        row.try_get::<Option<String>, _>("value")?,
        row.try_get::<Option<i64>, _>("generation")?,
        row.try_get::<Option<i64>, _>("expires_at")?,
    ) else {
        return my_locked(pool, key).await;
    };
    let (v, e) = next_value(Some(&old_v), old_e, now);
    let write_sql = format!(
        "UPDATE {t} SET generation = ?, value = ?, expires_at = ? \
         WHERE key_hash = ? AND generation = ? AND value = ? AND expires_at = ?"
    );
    let done = sqlx::query(&write_sql).bind(1_i64).bind(v).bind(e).bind(&key[..]).bind(old_g).bind(old_v).bind(old_e);
    let done = match &mut held {
        Some(c) => done.execute(&mut **c).await?,
        None => done.execute(pool).await?,
    };
    drop(held);
    if done.rows_affected() == 1 {
        Ok(())
    } else {
        my_locked(pool, key).await
    }
}

/// SQLite through sqlx, the transaction of `sqlite.rs`: BEGIN IMMEDIATE;
/// SELECT the row with the clock; the value alone when the expiry stays,
/// else the upsert; COMMIT.
pub(crate) async fn lite_sqlx(pool: &sqlx::SqlitePool, key: &[u8; 32]) -> Result<()> {
    let t = T_RAW;
    let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
    let row = sqlx::query(&format!(
        "SELECT {LITE_NOW} AS now, t.key_hash, t.generation, t.value, t.expires_at \
         FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN (?)"
    ))
    .bind(&key[..])
    .fetch_one(&mut *tx)
    .await?;
    let now: i64 = row.try_get("now")?;
    let old_e: Option<i64> = row.try_get("expires_at")?;
    let (v, e) = match row.try_get::<Option<&str>, _>("value")? {
        Some(v) => next_value(Some(v), old_e.unwrap_or(0), now),
        None => next_value(None, 0, now),
    };
    if old_e == Some(e) {
        sqlx::query(&format!("UPDATE {t} SET value = ? WHERE key_hash = ?"))
            .bind(v)
            .bind(&key[..])
            .execute(&mut *tx)
            .await?;
    } else {
        sqlx::query(&format!(
            "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
             value = excluded.value, expires_at = excluded.expires_at"
        ))
        .bind(&key[..])
        .bind(1_i64)
        .bind(v)
        .bind(e)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The same transaction with rusqlite on `callers` blocking threads, one
/// connection each (WAL, synchronous NORMAL, 1.5 s busy timeout, as the store
/// opens SQLite): the database's own ceiling, no async driver in between.
pub(crate) fn lite_rusqlite(
    path: &Path,
    table: &'static str,
    hashes: Arc<Vec<[u8; 32]>>,
    callers: usize,
    warmup: f64,
    secs: f64,
) -> Result<(f64, u64)> {
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..callers)
        .map(|c| {
            let (done, errors, stop, hashes) = (done.clone(), errors.clone(), stop.clone(), hashes.clone());
            let path = path.to_owned();
            std::thread::spawn(move || -> Result<()> {
                let mut conn = rusqlite::Connection::open(&path)?;
                conn.busy_timeout(Duration::from_millis(1_500))?;
                conn.pragma_update(None, "journal_mode", "wal")?;
                conn.pragma_update(None, "synchronous", "normal")?;
                let t = table;
                let mut rng = Rng::for_caller(c);
                while !stop.load(Ordering::Relaxed) {
                    let key = &hashes[rng.next(hashes.len())];
                    let one = (|| -> rusqlite::Result<()> {
                        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                        let (now, row): (i64, Option<(String, i64)>) = tx
                            .prepare_cached(&format!(
                                "SELECT {LITE_NOW} AS now, t.value, t.expires_at \
                                 FROM (SELECT 1) AS one LEFT JOIN {t} AS t ON t.key_hash IN (?)"
                            ))?
                            .query_row([&key[..]], |r| {
                                let v: Option<String> = r.get(1)?;
                                let e: Option<i64> = r.get(2)?;
                                Ok((r.get(0)?, v.zip(e)))
                            })?;
                        let (v, e) = match &row {
                            Some((v, e)) => next_value(Some(v), *e, now),
                            None => next_value(None, 0, now),
                        };
                        if row.as_ref().is_some_and(|(_, old_e)| *old_e == e) {
                            tx.prepare_cached(&format!("UPDATE {t} SET value = ? WHERE key_hash = ?"))?
                                .execute(rusqlite::params![v, &key[..]])?;
                        } else {
                            tx.prepare_cached(&format!(
                                "INSERT INTO {t} (key_hash, generation, value, expires_at) VALUES (?, ?, ?, ?) \
                                 ON CONFLICT (key_hash) DO UPDATE SET generation = excluded.generation, \
                                 value = excluded.value, expires_at = excluded.expires_at"
                            ))?
                            .execute(rusqlite::params![&key[..], 1_i64, v, e])?;
                        }
                        tx.commit()
                    })();
                    match one {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                                eprintln!("  error: {e}");
                            }
                            0
                        }
                    };
                }
                Ok(())
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(warmup));
    let (n0, e0, t0) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (n1, e1, t1) = (done.load(Ordering::Relaxed), errors.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("rusqlite thread panicked")?;
    }
    Ok(((n1 - n0) as f64 / (t1 - t0).as_secs_f64(), e1 - e0))
}
