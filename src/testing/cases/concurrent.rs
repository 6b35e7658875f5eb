//! Concurrent updates from both handles: exact counts, no lost first update,
//! multi-key updates atomic for writers and readers, no deadlock on overlaps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Barrier;
use tokio::task::JoinSet;

use super::super::support::*;
use super::super::StorePair;

/// Many tasks on both handles count one key: the total is exact.
pub async fn concurrent_counts_from_both_handles_are_exact(pair: StorePair) -> Outcome {
    const TASKS: usize = 16;
    const EACH: usize = 25;
    let keys = Arc::new(unique_keys(1));
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let (store, keys) = (handle(&pair, t), keys.clone());
        tasks.spawn(async move {
            for _ in 0..EACH {
                increment(&*store, &[keys[0].as_str()]).await?;
            }
            Ok(())
        });
    }
    join_all(tasks).await?;
    let got = read(&*pair.first, &[keys[0].as_str()]).await?;
    let want = (TASKS * EACH) as u64;
    ensure(count(&got[0]) == want, RULE_SERIAL, format!("count {want}"), || show(&got))
}

/// Tasks on both handles create the same fresh key at once, round after
/// round: every first update counts.
pub async fn first_update_of_a_key_is_never_lost(pair: StorePair) -> Outcome {
    const TASKS: usize = 12;
    const ROUNDS: usize = 10;
    let keys = Arc::new(unique_keys(ROUNDS));
    let barrier = Arc::new(Barrier::new(TASKS));
    let mut tasks = JoinSet::new();
    for t in 0..TASKS {
        let (store, keys, barrier) = (handle(&pair, t), keys.clone(), barrier.clone());
        tasks.spawn(async move {
            for key in keys.iter() {
                barrier.wait().await;
                increment(&*store, &[key.as_str()]).await?;
            }
            Ok(())
        });
    }
    join_all(tasks).await?;
    for chunk in keys.chunks(crate::MAX_KEYS) {
        let got = read(&*pair.second, &refs(chunk)).await?;
        ensure(
            got.iter().all(|e| count(e) == TASKS as u64),
            "a key's first update is never lost when two instances create it together",
            format!("every key counts {TASKS}"),
            || show(&got),
        )?;
    }
    Ok(())
}

/// Writers count three keys together while readers on both handles read them
/// (in several orders, and through `apply`): no reader ever sees them differ.
pub async fn multi_key_updates_are_never_seen_torn(pair: StorePair) -> Outcome {
    const WRITERS: usize = 8;
    const EACH: usize = 20;
    let rule = "an update on several keys is atomic across all of them, for readers too";
    let keys = Arc::new(unique_keys(3));
    let done = Arc::new(AtomicBool::new(false));
    let mut readers = JoinSet::new();
    for r in 0..4usize {
        let (store, keys, done) = (handle(&pair, r), keys.clone(), done.clone());
        readers.spawn(async move {
            let mut order = refs(&keys);
            order.rotate_left(r % 3);
            while !done.load(Ordering::Acquire) {
                let got = if r < 2 { read(&*store, &order).await? } else { seen_by_apply(&*store, &order).await?.0 };
                let counts: Vec<u64> = got.iter().map(count).collect();
                ensure(counts.windows(2).all(|w| w[0] == w[1]), rule, "all three keys at the same count", || {
                    format!("counts {counts:?} (keys in order {order:?})")
                })?;
                tokio::task::yield_now().await;
            }
            Ok(())
        });
    }
    let mut writers = JoinSet::new();
    for w in 0..WRITERS {
        let (store, keys) = (handle(&pair, w), keys.clone());
        writers.spawn(async move {
            let mut order = refs(&keys);
            order.rotate_left(w % 3);
            for _ in 0..EACH {
                increment(&*store, &order).await?;
            }
            Ok(())
        });
    }
    let written = join_all(writers).await;
    done.store(true, Ordering::Release);
    let seen = join_all(readers).await;
    written?;
    seen?;
    let got = read(&*pair.first, &refs(&keys)).await?;
    let want = (WRITERS * EACH) as u64;
    ensure(got.iter().all(|e| count(e) == want), RULE_SERIAL, format!("every key counts {want}"), || show(&got))
}

/// Updates on overlapping pairs of keys ([a, b], [b, c], [c, a], in both
/// orders, on both handles) finish without deadlock, and every count is exact.
pub async fn overlapping_multi_key_updates_are_exact(pair: StorePair) -> Outcome {
    const EACH: usize = 20;
    let keys = Arc::new(unique_keys(3));
    let pairs: [[usize; 2]; 6] = [[0, 1], [1, 2], [2, 0], [1, 0], [2, 1], [0, 2]];
    let mut tasks = JoinSet::new();
    for (t, [x, y]) in pairs.into_iter().enumerate() {
        let (store, keys) = (handle(&pair, t), keys.clone());
        tasks.spawn(async move {
            for _ in 0..EACH {
                increment(&*store, &[keys[x].as_str(), keys[y].as_str()]).await?;
            }
            Ok(())
        });
    }
    join_all(tasks).await?;
    // Each key is in four of the six pairs.
    let want = (4 * EACH) as u64;
    let got = read(&*pair.second, &refs(&keys)).await?;
    ensure(got.iter().all(|e| count(e) == want), RULE_SERIAL, format!("every key counts {want}"), || show(&got))
}
