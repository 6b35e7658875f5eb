//! The cluster's rows (`--cluster`, `--replicated`, `--bare-cluster`): see
//! main.rs.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use limit_store::{LimitStore, RedisStore};

use super::drive::{prefill, How, Keys};
use super::peers::{Contender, Runner};
use super::{
    probe, Opts, BARE1, BARE2, CLUSTER1, CLUSTER2, KEY_COUNT, ONE_KEY, PAIR, REPLICATED1, REPLICATED2, RLF_CLUSTER,
};

/// The cluster rows: `RedisStore` on `cluster` on one key and on two (keys
/// of their own, counted once first), the same two-key count on the one
/// server, and rate-limiter-flexible on the cluster; with `--replicated` and
/// `--bare-cluster`, the like-for-like rows.
pub(crate) async fn contenders(
    o: &Opts,
    cluster: &str,
    keys: &Arc<Vec<String>>,
    root: &Path,
) -> Result<Vec<Contender>> {
    let pairs = Arc::new(keys.iter().map(|k| format!("ip:{k}")).collect::<Vec<_>>());
    let firsts = Arc::new(keys.iter().map(|k| format!("acct:{k}")).collect::<Vec<_>>());
    // The one server's one-key count in these rounds: keys other than the
    // one server's first rows', so that their store's memory stays true.
    let solo = Arc::new(keys.iter().map(|k| format!("solo:{k}")).collect::<Vec<_>>());
    let builder = |url: &str| {
        let b = RedisStore::builder(url).secret(&"x".repeat(40)).prefix("lsbench").max_entries(100_000_000);
        // A pair store remembers both keys of every pair.
        b.remember(o.remember.unwrap_or(0).max(2 * KEY_COUNT))
    };
    // (row, server, two keys, its keys when one, `min_replicas_acked` applies)
    type Row<'a> = (&'static str, &'a str, bool, &'a Arc<Vec<String>>, bool);
    let mut rows: Vec<Row<'_>> = Vec::new();
    if o.bare_cluster.is_some() {
        rows.push((ONE_KEY, o.url.as_str(), false, &solo, false));
    }
    rows.push((PAIR, o.url.as_str(), true, keys, false));
    if let Some(url) = &o.replicated {
        rows.extend([(REPLICATED1, url.as_str(), false, keys, true), (REPLICATED2, url.as_str(), true, keys, true)]);
    }
    rows.extend([(CLUSTER1, cluster, false, keys, true), (CLUSTER2, cluster, true, keys, true)]);
    if let Some(url) = &o.bare_cluster {
        rows.extend([(BARE1, url.as_str(), false, keys, false), (BARE2, url.as_str(), true, keys, false)]);
    }
    let mut out = Vec::new();
    for (name, url, two, one, replicated) in rows.into_iter().filter(|row| o.runs(row.0)) {
        eprintln!("{name}: connecting, counting every key once");
        let acked = if replicated { o.min_acked } else { 0 };
        let store = builder(url).min_replicas_acked(acked).connect().await;
        let store = Arc::new(store.with_context(|| format!("connect to {url}"))?);
        let bare: Arc<dyn LimitStore> = store.clone();
        let (which, list) = if two { (Keys::Pair(pairs.clone()), firsts.clone()) } else { (Keys::Live, one.clone()) };
        prefill(bare.clone(), list.clone(), which.clone(), How::Update)
            .await
            .with_context(|| format!("{name}'s fill"))?;
        out.push(Contender {
            name,
            runner: Runner::Store {
                store: bare,
                redis: store,
                keys: which,
                list: Some(list),
                how: How::Update,
                probe: probe(o, url).await?,
            },
        });
    }
    if o.node && o.runs(RLF_CLUSTER) {
        eprintln!("rate-limiter-flexible on the cluster: starting, consuming every key once");
        let dir = root.join("bench").join("node");
        let n = KEY_COUNT.to_string();
        out.push(Contender::child(
            RLF_CLUSTER,
            &dir,
            "node",
            &["rlf.js", "--db", "redis-cluster", "--url", cluster, "--keys", &n],
        )?);
    }
    Ok(out)
}
