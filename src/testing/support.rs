//! What the cases share: unique keys, small store calls that turn errors into
//! violations, and waiting on the store's own clock.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::{json, Value};

use tokio::task::JoinSet;

use super::{ContractViolation, StorePair};
use crate::{Entry, LimitStore, Millis, StoreError, Write};

pub(crate) type Outcome = Result<(), ContractViolation>;

/// The rule a store call that should have worked broke.
pub(crate) const RULE_ANSWERS: &str = "a valid call on a healthy store succeeds";

/// `n` keys no other case or run uses: random, so the suite can run against a
/// shared server that holds other data.
pub(crate) fn unique_keys(n: usize) -> Vec<String> {
    let run: u64 = rand::rng().random();
    (0..n).map(|i| format!("limit-store-contract:{run:016x}:{i}")).collect()
}

pub(crate) fn refs(keys: &[String]) -> Vec<&str> {
    keys.iter().map(String::as_str).collect()
}

/// Turns a failed store call into a violation.
pub(crate) fn answered<T>(result: Result<T, StoreError>, what: &str) -> Result<T, ContractViolation> {
    result.map_err(|e| ContractViolation::new(RULE_ANSWERS, format!("{what} succeeds"), format!("error: {e}")))
}

/// Fails with `rule` unless `ok`.
pub(crate) fn ensure(
    ok: bool,
    rule: &'static str,
    expected: impl Into<String>,
    seen: impl FnOnce() -> String,
) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(ContractViolation::new(rule, expected, seen()))
    }
}

/// Writes `value` under `key`, live for `ttl_ms` on the store's clock; answers
/// the entry as written.
pub(crate) async fn put(
    store: &dyn LimitStore,
    key: &str,
    value: Value,
    ttl_ms: Millis,
) -> Result<Entry, ContractViolation> {
    let mut written = None;
    answered(
        store
            .update(&[key], &mut |_: &[Option<Entry>], now: Millis| {
                let entry = Entry { value: value.clone(), expires_at: now + ttl_ms };
                written = Some(entry.clone());
                vec![Write::Put(entry)]
            })
            .await,
        "an update that puts one entry",
    )?;
    written.ok_or_else(|| {
        ContractViolation::new(RULE_ANSWERS, "update calls apply", "update returned Ok without calling apply")
    })
}

/// What `apply` sees for `keys`, and the store's `now`, writing nothing.
pub(crate) async fn seen_by_apply(
    store: &dyn LimitStore,
    keys: &[&str],
) -> Result<(Vec<Option<Entry>>, Millis), ContractViolation> {
    let mut seen = None;
    answered(
        store
            .update(keys, &mut |current: &[Option<Entry>], now: Millis| {
                seen = Some((current.to_vec(), now));
                vec![Write::Keep; current.len()]
            })
            .await,
        "an update that keeps every key",
    )?;
    seen.ok_or_else(|| {
        ContractViolation::new(RULE_ANSWERS, "update calls apply", "update returned Ok without calling apply")
    })
}

pub(crate) async fn read(store: &dyn LimitStore, keys: &[&str]) -> Result<Vec<Option<Entry>>, ContractViolation> {
    let got = answered(store.read(keys).await, "a read")?;
    ensure(
        got.len() == keys.len(),
        "read answers one slot per key, in key order",
        format!("{} slots", keys.len()),
        || format!("{} slots", got.len()),
    )?;
    Ok(got)
}

/// The store's clock, as `apply` sees it.
pub(crate) async fn store_now(store: &dyn LimitStore) -> Result<Millis, ContractViolation> {
    let key = unique_keys(1);
    Ok(seen_by_apply(store, &refs(&key)).await?.1)
}

/// Waits until the store's clock reaches `at`; fails if it stands still.
pub(crate) async fn wait_for_store_clock(store: &dyn LimitStore, at: Millis) -> Outcome {
    let started = Instant::now();
    loop {
        let now = store_now(store).await?;
        if now >= at {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(20) {
            return Err(ContractViolation::new(
                "the store's clock advances with time",
                format!("now reaches {at} within 20 s"),
                format!("now is still {now}"),
            ));
        }
        let left = u64::try_from((at - now).clamp(1, 200)).unwrap_or(200);
        tokio::time::sleep(Duration::from_millis(left)).await;
    }
}

/// The counter value kept by [`increment`].
pub(crate) fn count(entry: &Option<Entry>) -> u64 {
    entry.as_ref().and_then(|e| e.value.get("n")).and_then(Value::as_u64).unwrap_or(0)
}

/// Adds one to the counter of every key, in one update, as a limit would.
pub(crate) async fn increment(store: &dyn LimitStore, keys: &[&str]) -> Outcome {
    answered(
        store
            .update(keys, &mut |current: &[Option<Entry>], now: Millis| {
                current
                    .iter()
                    .map(|e| {
                        let expires_at = e.as_ref().map_or(now + 600_000, |e| e.expires_at);
                        Write::Put(Entry { value: json!({ "n": count(e) + 1 }), expires_at })
                    })
                    .collect()
            })
            .await,
        "an update that counts",
    )
}

pub(crate) fn show(entries: &[Option<Entry>]) -> String {
    format!("{entries:?}")
}

/// The rule concurrent calls break when they interleave.
pub(crate) const RULE_SERIAL: &str = "concurrent updates from both handles behave as if run one at a time";

/// The first handle for even `i`, the second for odd: tasks split over both.
pub(crate) fn handle(pair: &StorePair, i: usize) -> Arc<dyn LimitStore> {
    if i.is_multiple_of(2) {
        pair.first.clone()
    } else {
        pair.second.clone()
    }
}

/// Waits for every task; the first violation (or a panic, or a deadlock) wins.
pub(crate) async fn join_all(mut tasks: JoinSet<Outcome>) -> Outcome {
    let all = async {
        while let Some(joined) = tasks.join_next().await {
            joined.map_err(|e| {
                ContractViolation::new(RULE_ANSWERS, "every task finishes", format!("a task failed: {e}"))
            })??;
        }
        Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(120), all).await {
        Ok(outcome) => outcome,
        Err(_) => {
            Err(ContractViolation::new(RULE_SERIAL, "concurrent updates finish", "no progress for 120 s: a deadlock?"))
        }
    }
}
