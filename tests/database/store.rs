//! The database store beyond the contract, on every database: keys never
//! stored in the clear, secret rotation, corrupt rows, setup errors that say
//! what to do, refusal inside the app's transaction, and locked databases
//! answered unavailable within the deadline; and its callers: a SQLite
//! caller that stops waiting, remembered rows, SQLite's counts
//! run in place. Sweeping is in `sweeper.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::db::{databases, drop_table, put, raw, server, sqlite_url, SECRET};
use limit_store::error::Unavailable;
use limit_store::{DatabaseStore, Entry, Guarded, LimitStore, Millis, Write};
use serde_json::json;
use sha2::{Digest, Sha256};
use sqlx::Row;

/// A migrated store on `table`, without a sweeper.
pub(crate) async fn store(url: &str, table: &str, secret: &str) -> DatabaseStore {
    DatabaseStore::builder(url).table(table).migrate().await.expect("migrate");
    DatabaseStore::builder(url).table(table).secret(secret).sweep_every(None).connect().await.expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_never_stored_in_the_clear() {
    for (url, table) in databases("dump") {
        let db = store(&url, &table, SECRET).await;
        let keys = ["sign-in:account:ada@example.com", "sign-in:ip:192.0.2.1"];
        for key in keys {
            put(&db, key, 1, 60_000).await.unwrap();
        }
        // Dump every row, the hash as hex beside the value, and look for the keys.
        let dump = if url.starts_with("postgres") {
            format!("SELECT encode(key_hash, 'hex') || ' ' || value FROM {table}")
        } else if url.starts_with("mysql") {
            format!("SELECT CAST(CONCAT(HEX(key_hash), ' ', value) AS CHAR) FROM {table}")
        } else {
            format!("SELECT CAST(hex(key_hash) || ' ' || value AS TEXT) FROM {table}")
        };
        let pool = raw(&url).await;
        // Some drivers type the concatenation as text, some as bytes.
        let rows: Vec<String> = sqlx::query(&dump)
            .fetch_all(&pool)
            .await
            .unwrap()
            .iter()
            .map(|r| {
                r.try_get::<String, _>(0)
                    .unwrap_or_else(|_| String::from_utf8_lossy(&r.get::<Vec<u8>, _>(0)).into_owned())
            })
            .collect();
        assert_eq!(rows.len(), 2, "{url}");
        let dump = rows.join("\n").to_lowercase();
        for key in keys {
            let plain: String = Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
            let key_hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
            for needle in [key.to_lowercase(), plain, key_hex] {
                assert!(!dump.contains(&needle), "{url}: found {key:?}, its hex or its SHA-256 in the table:\n{dump}");
            }
        }
        drop_table(&url, &table).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_secret_reads_nothing_old_and_old_rows_expire_in_their_time() {
    let new_secret = "a-new-secret-after-rotation-abcdefghijklmnopqrstuvwxyz";
    for (url, table) in databases("rotation") {
        let old = store(&url, &table, SECRET).await;
        let max = 10;
        for i in 0..5 {
            put(&old, &format!("k{i}"), 7, 60_000).await.unwrap();
        }
        put(&old, "short", 7, 800).await.unwrap();
        let new = DatabaseStore::builder(&url)
            .table(&table)
            .secret(new_secret)
            .max_entries(max)
            .sweep_every(None)
            .connect()
            .await
            .unwrap();
        let (new_generation, old_generation) =
            (new.info().await.unwrap().generation, old.info().await.unwrap().generation);
        assert_ne!(new_generation, old_generation);
        // The new instances can't read the old rows…
        assert_eq!(new.read(&["k0", "k1"]).await.unwrap(), vec![None, None], "{url}");
        // …the old ones don't count against their bound…
        assert_eq!(new.info().await.unwrap().live_entries, 0, "{url}");
        // One family of keys alone takes 80% of the bound (its share).
        for i in 0..max - max / 5 {
            put(&new, &format!("n{i}"), 1, 60_000).await.unwrap_or_else(|e| panic!("{url}: new key {i}: {e}"));
        }
        let err = put(&new, "one-too-many", 1, 60_000).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }), "{url}: {err}");
        // …and instances still on the old secret keep counting with them.
        let got = old.read(&["k0"]).await.unwrap();
        assert_eq!(got[0].as_ref().unwrap().value, json!({"n": 7}), "{url}");
        let generations = new.info().await.unwrap().generations;
        assert!(
            generations.contains(&(old_generation, 6)) && generations.contains(&(new_generation, 8)),
            "{url}: {generations:?}"
        );
        assert_eq!(generations[0].0, new_generation, "{url}: the store's own generation comes first: {generations:?}");
        let seen_by_old = old.info().await.unwrap().generations;
        assert_eq!(seen_by_old[0].0, old_generation, "{url}: the old store's own comes first: {seen_by_old:?}");
        // Old rows go when they expire, not sooner: a sweep keeps the live ones.
        tokio::time::sleep(Duration::from_millis(900)).await;
        let removed = new.sweep().await.unwrap();
        assert_eq!(removed, 1, "{url}: only the expired old row goes");
        assert_eq!(
            old.read(&["k4"]).await.unwrap()[0].as_ref().map(|e| e.value.clone()),
            Some(json!({"n": 7})),
            "{url}"
        );
        drop_table(&url, &table).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_row_fails_its_key_only() {
    for (url, table) in databases("corrupt") {
        let db = store(&url, &table, SECRET).await;
        put(&db, "good", 1, 60_000).await.unwrap();
        put(&db, "bad", 99, 60_000).await.unwrap();
        let pool = raw(&url).await;
        // Break the bad key's JSON: its value is the only {"n":99}.
        let broke = sqlx::query(&format!("UPDATE {table} SET value = '{{not json' WHERE value = '{{\"n\":99}}'"))
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(broke.rows_affected(), 1, "{url}");
        put(&db, "good", 2, 60_000).await.unwrap();
        // A call on both keys fails (it is atomic), naming the bad key's hash.
        let both = db.read(&["good", "bad"]).await.unwrap_err();
        assert!(matches!(both, limit_store::StoreError::Corrupt { .. }), "{url}: {both}");
        let err = db.read(&["bad"]).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Corrupt { .. }), "{url}: {err}");
        let message = err.to_string();
        assert!(message.contains("key hash") && !message.contains("bad\""), "{url}: {message}");
        let err = put(&db, "bad", 3, 60_000).await.unwrap_err();
        assert!(matches!(err, limit_store::StoreError::Corrupt { .. }), "{url}: {err}");
        assert_eq!(db.read(&["good"]).await.unwrap()[0].as_ref().unwrap().value, json!({"n": 2}), "{url}");
        drop_table(&url, &table).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_errors_say_what_to_do() {
    let err = DatabaseStore::builder("oracle://db").secret(SECRET).connect().await.unwrap_err();
    assert!(matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("sqlite://"), "{err}");
    let err = DatabaseStore::builder("sqlite::memory:").secret("short").connect().await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("at least 32 bytes"),
        "{err}"
    );
    let err = DatabaseStore::builder("sqlite::memory:").connect().await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("LIMIT_STORE_SECRET"),
        "{err}"
    );
    let err = DatabaseStore::builder("sqlite::memory:").table("x; drop").secret(SECRET).connect().await.unwrap_err();
    assert!(
        matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("letters, digits"),
        "{err}"
    );
    for (url, table) in databases("missing") {
        let err = DatabaseStore::builder(&url).table(&table).secret(SECRET).connect().await.unwrap_err();
        assert!(
            matches!(err, limit_store::StoreError::Setup { .. }) && err.to_string().contains("limit-store migrate"),
            "{url}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_database_is_answered_unavailable_within_the_deadline() {
    for (url, table) in databases("locked") {
        let db = Arc::new(store(&url, &table, SECRET).await);
        put(&*db, "k", 1, 60_000).await.unwrap();
        let pool = raw(&url).await;
        let mut locker = pool.begin().await.unwrap();
        // Hold the table's rows (or, on SQLite, the write lock) in another transaction.
        let hold = if url.starts_with("postgres") {
            format!("LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        } else {
            format!("UPDATE {table} SET value = value")
        };
        sqlx::query(&hold).execute(&mut *locker).await.unwrap();
        let guarded = Guarded::new(db.clone() as Arc<dyn LimitStore>);
        let started = Instant::now();
        let err = put(&guarded, "k", 2, 60_000).await.unwrap_err();
        let took = started.elapsed();
        assert!(matches!(err, limit_store::StoreError::Unavailable { .. }), "{url}: {err}");
        assert!(took < Duration::from_millis(2_500), "{url}: answered after {took:?}");
        locker.rollback().await.unwrap();
        put(&guarded, "k", 3, 60_000).await.expect("counts again once the lock is gone");
        drop_table(&url, &table).await;
    }
}

/// SQLite: a caller that stops waiting while its count waits for the write
/// lock (a deadline above the store) counts nothing, even once the lock is
/// gone, and its `apply` is never called after it stopped waiting. The count
/// still runs on its blocking thread, and must roll back. (On the servers a
/// count already decided may still land: its statement is on the server.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_caller_that_stops_waiting_counts_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    sqlx::any::install_default_drivers();
    let (url, table) =
        (sqlite_url("dropped"), format!("ls_dropped_{}", crate::common::db::rand_suffix() % 1_000_000_000));
    let db = store(&url, &table, SECRET).await;
    put(&db, "k", 1, 60_000).await.unwrap();
    let pool = raw(&url).await;
    let mut locker = pool.begin().await.unwrap();
    sqlx::query(&format!("UPDATE {table} SET value = value")).execute(&mut *locker).await.unwrap();
    let gone = Arc::new(AtomicBool::new(false));
    let late_calls = Arc::new(AtomicUsize::new(0));
    let (seen_gone, late) = (gone.clone(), late_calls.clone());
    let mut apply = move |_: &[Option<Entry>], now: Millis| {
        if seen_gone.load(Ordering::SeqCst) {
            late.fetch_add(1, Ordering::SeqCst);
        }
        vec![Write::Put(Entry { value: json!({ "n": 2 }), expires_at: now + 60_000 })]
    };
    let stopped = tokio::time::timeout(Duration::from_millis(300), db.update(&["k"], &mut apply)).await;
    assert!(stopped.is_err(), "{url}: the count waits on the lock");
    gone.store(true, Ordering::SeqCst);
    locker.rollback().await.unwrap();
    // Longer than the busy timeout: whatever still ran has finished.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(db.read(&["k"]).await.unwrap()[0].as_ref().unwrap().value, json!({ "n": 1 }), "{url}");
    assert_eq!(late_calls.load(Ordering::SeqCst), 0, "{url}: apply was called after its caller left");
    put(&db, "k", 3, 60_000).await.expect("counts again");
    drop_table(&url, &table).await;
}

/// Adds one to the count under `key` (a bare number), or starts it at 1.
async fn add_one(store: &DatabaseStore, key: &str) -> u64 {
    limit_store::update_with(store, &[key], |current: &[Option<Entry>], now: Millis| {
        let (n, expires_at) = match &current[0] {
            Some(e) => (e.value.as_u64().unwrap(), e.expires_at),
            None => (0, now + 60_000),
        };
        (vec![Write::Put(Entry { value: json!(n + 1), expires_at })], n + 1)
    })
    .await
    .unwrap()
}

/// On PostgreSQL and MySQL a count on a key this store wrote last is one
/// statement; a row that another store changed, or removed, since makes the
/// guess miss, and the count goes on from the row it reads (on PostgreSQL,
/// the same statement read it): exact either way, also with both stores
/// counting at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_rows_count_in_one_statement_and_stay_exact() {
    sqlx::any::install_default_drivers();
    for url in ["LIMIT_STORE_TEST_POSTGRES", "LIMIT_STORE_TEST_MYSQL"].into_iter().filter_map(server) {
        remembered_rows_on(&url).await;
    }
}

async fn remembered_rows_on(url: &str) {
    let table = format!("ls_remember_{}", crate::common::db::rand_suffix() % 1_000_000_000);
    let (a, b) = (store(url, &table, SECRET).await, store(url, &table, SECRET).await);
    let key = "api:user:42";
    for n in 1..=5 {
        assert_eq!(add_one(&a, key).await, n);
    }
    let paths = a.info().await.unwrap();
    assert_eq!(paths.one_statement + paths.read_then_write + paths.locked, 5, "{paths:?}");
    // The first count has no clock reading to guess from; most of the rest
    // are one statement (a slow spell of over 50 ms may make one miss).
    assert!(paths.one_statement >= 2, "{url}: {paths:?}");

    // Another instance counts: `a`'s remembered row is stale now.
    for n in 6..=8 {
        assert_eq!(add_one(&b, key).await, n);
    }
    let before = a.info().await.unwrap();
    assert_eq!(add_one(&a, key).await, 9, "a stale remembered row must not be counted from");
    let after = a.info().await.unwrap();
    assert_eq!(after.one_statement, before.one_statement, "the guess missed: {after:?}");
    assert_eq!(after.read_then_write, before.read_then_write + 1, "{after:?}");

    // Another instance removes the row: `a` starts afresh.
    b.update(&[key], &mut |_: &[Option<Entry>], _| vec![Write::Delete]).await.unwrap();
    assert_eq!(add_one(&a, key).await, 1);
    // A count that writes nothing is confirmed in one statement too.
    let before = a.info().await.unwrap();
    let seen = limit_store::update_with(&a, &[key], |current: &[Option<Entry>], _| {
        (vec![Write::Keep], current[0].as_ref().map(|e| e.value.clone()))
    })
    .await
    .unwrap();
    assert_eq!(seen, Some(json!(1)));
    let after = a.info().await.unwrap();
    assert!(after.one_statement + after.read_then_write == before.one_statement + before.read_then_write + 1);

    // A delete of a row this store remembers is one statement as well (a
    // slow spell may make one miss: three tries); a delete of a row another
    // store changed since misses, and deletes the row it reads.
    let delete = |store: &DatabaseStore| {
        let store = store.clone();
        async move { store.update(&[key], &mut |_: &[Option<Entry>], _| vec![Write::Delete]).await.unwrap() }
    };
    let mut in_one = 0;
    for _ in 0..3 {
        assert_eq!(add_one(&a, key).await, 2);
        let before = a.info().await.unwrap();
        delete(&a).await;
        in_one += a.info().await.unwrap().one_statement - before.one_statement;
        assert_eq!(b.read(&[key]).await.unwrap()[0], None, "{url}: deleted");
        assert_eq!(add_one(&a, key).await, 1);
    }
    assert!(in_one >= 1, "{url}: no delete of a remembered row was one statement");
    add_one(&b, key).await;
    let before = a.info().await.unwrap();
    delete(&a).await;
    assert_eq!(b.read(&[key]).await.unwrap()[0], None, "{url}: a stale remembered row is deleted all the same");
    assert_eq!(a.info().await.unwrap().read_then_write, before.read_then_write + 1, "{url}: the guess missed");
    assert_eq!(add_one(&a, key).await, 1);

    // Both at once, many tasks each: every count lands exactly once.
    let (a, b) = (Arc::new(a), Arc::new(b));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let store = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                add_one(&store, key).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let got = a.read(&[key]).await.unwrap();
    assert_eq!(got[0].as_ref().unwrap().value, json!(201));
    let (pa, pb) = (a.info().await.unwrap(), b.info().await.unwrap());
    eprintln!("paths under contention: {pa:?} {pb:?}");
    drop_table(url, &table).await;
}

/// SQLite, many callers at once, adding keys as they go: they take turns in
/// the store, so none waits past SQLite's busy timeout, and every count
/// lands once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_serves_many_callers_without_locked_errors() {
    let url = sqlite_url("many-callers");
    DatabaseStore::builder(&url).migrate().await.unwrap();
    let db = DatabaseStore::builder(&url).secret(SECRET).max_connections(32).connect().await.unwrap();
    let db = Arc::new(db);
    let tasks: Vec<_> = (0..32)
        .map(|t| {
            let db = db.clone();
            tokio::spawn(async move {
                for i in 0..600 {
                    add_one(&db, &format!("k{}", (t * 7 + i) % 50)).await;
                    add_one(&db, &format!("new-{t}-{i}")).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    let mut total = 0;
    for chunk in keys.chunks(limit_store::MAX_KEYS) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        for e in db.read(&chunk).await.unwrap() {
            total += e.unwrap().value.as_u64().unwrap();
        }
    }
    assert_eq!(total, 19_200);
}
