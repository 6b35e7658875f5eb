//! Resharding under load, on a Redis Cluster of the test's own: while tasks
//! count one-slot and two-slot updates, the slots their keys live in move to
//! another primary the way `redis-cli --cluster reshard` moves them
//! (`CLUSTER SETSLOT … IMPORTING` and `MIGRATING`, `MIGRATE … KEYS` a few
//! keys at a time, then `CLUSTER SETSLOT … NODE` on every primary), and then
//! back. Calls meet `ASK` (and `TRYAGAIN`) while a slot moves and `MOVED`
//! after: a key read while its slot is half moved is read at its new node,
//! every call is answered within the guard's 2.5 s, and every task counts
//! while its slots are away and after they came back, on the same stores.
//! Afterwards every count is exact: a budget raced by three tasks granted
//! exactly its size (give or take calls answered unavailable, which may have
//! applied), both keys of every two-slot update agree, and every acknowledged
//! count is stored.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::redis_cluster::Topology;
use crate::slot_moves::{errors, names_in, reshard, slot_of, Move, Secret};
use limit_store::{update_with, Entry, Guarded, LimitStore, RedisStore, StoreError, Write};
use redis::cluster_routing::Slot;
use serde_json::json;

const SECRET: &str = "limit-store resharding tests: a secret of 32+ bytes";
/// How many slots move from each of two primaries (and back).
const SLOTS: u16 = 16;
/// The budget raced in each round.
const BUDGET: u64 = 37;
/// Rounds of the budget race the keys are found for (not all are reached).
const ROUNDS: usize = 24;
/// The answer every call must get within, served or not.
const ANSWERED_WITHIN: Duration = Duration::from_millis(2_500);

/// Where the slots stand: moving there, `AWAY` (at their new owners),
/// moving back, `BACK`; how many tasks have counted in this stage; and
/// whether to stop counting.
#[derive(Default)]
struct Phase {
    stage: AtomicU8,
    counted: AtomicU64,
    stop: AtomicBool,
}

impl Phase {
    /// Moves on to `stage`.
    fn enter(&self, stage: u8) {
        self.counted.store(0, Ordering::Relaxed);
        self.stage.store(stage, Ordering::Relaxed);
    }

    /// Waits until each of `tasks` has counted in this stage (10 s at most:
    /// the checks after say which did not).
    async fn all_counted(&self, tasks: usize) {
        let began = Instant::now();
        while self.counted.load(Ordering::Relaxed) < tasks as u64 && began.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

const AWAY: u8 = 1;
const MOVING_BACK: u8 = 2;
const BACK: u8 = 3;

/// What one counting task did.
#[derive(Debug)]
struct Tally {
    keys: Vec<String>,
    acked: u64,
    failed: u64,
    /// Calls acknowledged that began while the slots were away.
    acked_away: u64,
    /// Calls acknowledged that began after the slots came back.
    acked_after: u64,
    slowest: Duration,
}

/// Adds one to every key in one update (one slot for one key, two for a pair).
async fn add(store: &dyn LimitStore, keys: &[&str]) -> Result<(), StoreError> {
    update_with(store, keys, |current, now| {
        let put = |e: &Option<Entry>| {
            let n = e.as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0);
            Write::Put(Entry { value: json!({ "n": n + 1 }), expires_at: now + 600_000 })
        };
        (current.iter().map(put).collect(), ())
    })
    .await
}

/// Counts one attempt on both keys if both are under the budget.
async fn attempt(store: &dyn LimitStore, keys: [&str; 2]) -> Result<bool, limit_store::StoreError> {
    crate::common::redis::attempt_both(store, keys, BUDGET).await
}

/// Every key's count, read as one snapshot.
async fn counts(store: &dyn LimitStore, keys: &[&str]) -> Vec<u64> {
    let held = store.read(keys).await.expect("a read once the slots have moved");
    held.iter().map(|e| e.as_ref().and_then(|e| e.value["n"].as_u64()).unwrap_or(0)).collect()
}

/// Counts `keys` in one update after another until told to stop.
fn counting(store: Arc<Guarded>, keys: Vec<String>, phase: Arc<Phase>) -> tokio::task::JoinHandle<Tally> {
    tokio::spawn(async move {
        let mut tally = Tally { keys, acked: 0, failed: 0, acked_away: 0, acked_after: 0, slowest: Duration::ZERO };
        let keys: Vec<&str> = tally.keys.iter().map(String::as_str).collect();
        while !phase.stop.load(Ordering::Relaxed) {
            let stage = phase.stage.load(Ordering::Relaxed);
            let began = Instant::now();
            match add(&*store, &keys).await {
                Ok(()) => {
                    tally.acked += 1;
                    let away = stage == AWAY && stage == phase.stage.load(Ordering::Relaxed);
                    if (away && tally.acked_away == 0) || (stage == BACK && tally.acked_after == 0) {
                        phase.counted.fetch_add(1, Ordering::Relaxed);
                    }
                    tally.acked_away += u64::from(away);
                    tally.acked_after += u64::from(stage == BACK);
                }
                Err(e) => {
                    assert!(matches!(e, limit_store::StoreError::Unavailable { .. }), "{keys:?}: {e}");
                    tally.failed += 1;
                }
            }
            tally.slowest = tally.slowest.max(began.elapsed());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tally
    })
}

/// One round of the budget race: attempts granted and answered unavailable.
#[derive(Default)]
struct Round {
    granted: AtomicU64,
    failed: AtomicU64,
    /// Tasks that were refused: the budget was spent.
    refused: AtomicU64,
}

/// Races the budget of each round in turn (the next once refused) until
/// told to stop; answers the slowest call.
fn racing(
    store: Arc<Guarded>,
    keys: Arc<Vec<[String; 2]>>,
    rounds: Arc<Vec<Round>>,
    phase: Arc<Phase>,
) -> tokio::task::JoinHandle<Duration> {
    tokio::spawn(async move {
        let (mut r, mut slowest) = (0, Duration::ZERO);
        while r < keys.len() && !phase.stop.load(Ordering::Relaxed) {
            let began = Instant::now();
            match attempt(&*store, [&keys[r][0], &keys[r][1]]).await {
                Ok(true) => drop(rounds[r].granted.fetch_add(1, Ordering::Relaxed)),
                Ok(false) => {
                    rounds[r].refused.fetch_add(1, Ordering::Relaxed);
                    r += 1;
                }
                Err(e) => {
                    assert!(matches!(e, limit_store::StoreError::Unavailable { .. }), "budget round {r}: {e}");
                    rounds[r].failed.fetch_add(1, Ordering::Relaxed);
                }
            }
            slowest = slowest.max(began.elapsed());
        }
        slowest
    })
}

/// The keys the test counts.
struct Keys {
    /// One-key updates (one slot).
    singles: Vec<String>,
    /// Two-key updates, one key in each range (two slots).
    pairs: Vec<Vec<String>>,
    /// The budget race's rounds, one key in each range.
    budgets: Vec<[String; 2]>,
}

impl Keys {
    /// Keys in `in_a` and `in_b`: the pairs' primary key (where a two-slot
    /// update commits) is in `in_a` for half of them, in `in_b` for the others.
    fn find(in_a: std::ops::Range<u16>, in_b: std::ops::Range<u16>) -> Keys {
        let secret = Secret::new(SECRET).unwrap();
        let singles =
            names_in(&secret, "one-a", in_a.clone(), 4).into_iter().chain(names_in(&secret, "one-b", in_b.clone(), 4));
        let (pair_a, pair_b) =
            (names_in(&secret, "pair-a", in_a.clone(), 4), names_in(&secret, "pair-b", in_b.clone(), 4));
        let pairs = pair_a.into_iter().zip(pair_b).enumerate();
        let budgets = names_in(&secret, "account", in_a, ROUNDS).into_iter().zip(names_in(&secret, "ip", in_b, ROUNDS));
        Keys {
            singles: singles.collect(),
            pairs: pairs.map(|(i, (x, y))| if i % 2 == 0 { vec![x, y] } else { vec![y, x] }).collect(),
            budgets: budgets.map(|(x, y)| [x, y]).collect(),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resharding_under_load_is_followed_and_every_count_stays_exact() {
    let _alone = crate::alone().await;
    // Slots of the first primary move to the second, of the second to the
    // third, then back; the keys are found while the cluster starts.
    let (in_a, in_b) = (1_000..1_000 + SLOTS, 7_000..7_000 + SLOTS);
    let keys = std::thread::spawn({
        let (in_a, in_b) = (in_a.clone(), in_b.clone());
        move || Keys::find(in_a, in_b)
    });
    let Some(topology) = Topology::start() else { return };
    let Keys { singles, pairs, budgets } = keys.join().expect("the keys");
    let (a, b, c) = (topology.base, topology.base + 1, topology.base + 2);
    let primaries = [a, b, c];
    let open = |acked: u32| {
        let url = topology.url.clone();
        async move {
            let store = RedisStore::builder(&url).secret(SECRET).sweep_every(None).min_replicas_acked(acked);
            Arc::new(Guarded::new(Arc::new(store.connect().await.unwrap()) as Arc<dyn LimitStore>))
        }
    };
    // Counts answered as applied, and counts that wait for a replica (each
    // step then a pipeline with `WAIT`, which a redirect sends again whole).
    let stores = [open(0).await, open(1).await];
    let phase = Arc::new(Phase::default());
    let mut tasks = Vec::new();
    for (i, keys) in singles.iter().map(|k| vec![k.clone()]).chain(pairs.iter().cloned()).enumerate() {
        tasks.push(counting(stores[i % 2].clone(), keys, phase.clone()));
    }
    let budgets = Arc::new(budgets);
    let rounds: Arc<Vec<Round>> = Arc::new((0..ROUNDS).map(|_| Round::default()).collect());
    let racers: Vec<_> =
        (0..3).map(|i| racing(stores[i % 2].clone(), budgets.clone(), rounds.clone(), phase.clone())).collect();

    tokio::time::sleep(Duration::from_millis(300)).await;
    for &p in &primaries {
        assert_eq!(topology.cli(p, &["CONFIG", "RESETSTAT"]), "OK");
    }
    let there: Vec<Move> = in_a
        .zip(in_b)
        .flat_map(|(sa, sb)| [Move { slot: sa, from: a, to: b }, Move { slot: sb, from: b, to: c }])
        .collect();
    let back: Vec<Move> = there.iter().map(|m| Move { slot: m.slot, from: m.to, to: m.from }).collect();
    // Each one-slot key read while its slot is half moved (every key of it at
    // the new owner, which the old one answers with `ASK`): the read follows.
    // (A two-slot key may hold a lock then, and resolving it names its
    // update's record, a key that may not exist yet: Redis answers
    // `TRYAGAIN` until the slot has moved, and such a read is unavailable.)
    let probed = Arc::new(AtomicU64::new(0));
    let probe = {
        let (store, probed, runtime) = (stores[0].clone(), probed.clone(), tokio::runtime::Handle::current());
        let secret = Secret::new(SECRET).unwrap();
        let keys = singles.clone();
        move |m: &Move| {
            let slot = Slot::new(m.slot).unwrap();
            for key in keys.iter().filter(|k| slot_of(&secret, k) == slot) {
                let read = runtime.block_on(store.read(&[key]));
                let n = read.unwrap_or_else(|e| panic!("{key} read while slot {} is half moved: {e:?}", m.slot));
                assert!(n[0].is_some(), "{key} read as empty while slot {} is half moved", m.slot);
                probed.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let began = Instant::now();
    let probe = tokio::task::spawn_blocking(move || {
        let mut probe = probe;
        reshard(&there, &primaries, &mut probe);
        probe
    })
    .await
    .expect("the slots move there");
    let mut took = began.elapsed();
    // Every task counts with its slots away, on the same stores.
    phase.enter(AWAY);
    phase.all_counted(tasks.len()).await;
    phase.enter(MOVING_BACK);
    let began = Instant::now();
    tokio::task::spawn_blocking(move || {
        let mut probe = probe;
        reshard(&back, &primaries, &mut probe)
    })
    .await
    .expect("the slots move back");
    took += began.elapsed();
    phase.enter(BACK);
    let [ask, moved, again] = ["ASK", "MOVED", "TRYAGAIN"].map(|e| errors(&topology, &primaries, e));
    phase.all_counted(tasks.len()).await;
    // And the race has spent one budget at least (on a slow host it may not have yet).
    let began = Instant::now();
    while rounds[0].refused.load(Ordering::Relaxed) == 0 && began.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    phase.stop.store(true, Ordering::Relaxed);

    let mut tallies = Vec::new();
    for task in tasks {
        tallies.push(task.await.expect("a counting task"));
    }
    let mut slowest = Duration::ZERO;
    for racer in racers {
        slowest = slowest.max(racer.await.expect("a racing task"));
    }
    for store in &stores {
        while store.in_flight() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let probed = probed.load(Ordering::Relaxed);
    eprintln!(
        "moved {SLOTS}+{SLOTS} slots there and back in {took:?}, {probed} keys read half moved: \
         the primaries answered ASK {ask}, MOVED {moved}, TRYAGAIN {again}"
    );
    assert!(ask > 0 && moved > 0, "calls met a slot half moved (ASK {ask}) and one moved (MOVED {moved})");
    assert_eq!(probed, 2 * singles.len() as u64, "every one-slot key was read half moved, twice");
    for (port, slot) in [(b, 1_000), (c, 7_000)] {
        let left = topology.cli(port, &["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);
        assert_eq!(left, "0", "{port} still holds keys of slot {slot}, which moved back");
    }

    let store = &*stores[0];
    for tally in &tallies {
        let keys: Vec<&str> = tally.keys.iter().map(String::as_str).collect();
        assert!(tally.slowest <= ANSWERED_WITHIN, "{keys:?}: a call was answered after {:?}", tally.slowest);
        assert!(tally.acked_away > 0, "{keys:?}: no count while the slots were away: {tally:?}");
        assert!(tally.acked_after > 0, "{keys:?}: no count after the slots came back: {tally:?}");
        let n = counts(store, &keys).await;
        assert!(n.iter().all(|&x| x == n[0]), "{keys:?}: both keys of a two-slot update agree: {n:?}");
        assert!(
            (tally.acked..=tally.acked + tally.failed).contains(&n[0]),
            "{keys:?}: stored {}, acknowledged {}, answered unavailable {}",
            n[0],
            tally.acked,
            tally.failed
        );
    }
    assert!(slowest <= ANSWERED_WITHIN, "a budget attempt was answered after {slowest:?}");
    let mut spent = 0;
    for (round, keys) in rounds.iter().zip(budgets.iter()) {
        let (granted, failed) = (round.granted.load(Ordering::Relaxed), round.failed.load(Ordering::Relaxed));
        let n = counts(store, &[&keys[0], &keys[1]]).await;
        assert_eq!(n[0], n[1], "{keys:?}: both keys of a two-slot update agree");
        assert!(granted <= BUDGET && n[0] <= BUDGET, "{keys:?}: granted {granted}, stored {}", n[0]);
        let stored = n[0];
        assert!(
            (granted..=granted + failed).contains(&stored),
            "{keys:?}: granted {granted}, failed {failed}, stored {stored}"
        );
        if round.refused.load(Ordering::Relaxed) > 0 {
            spent += 1;
            assert_eq!(stored, BUDGET, "{keys:?}: refused before the budget was spent");
            if failed == 0 {
                assert_eq!(granted, BUDGET, "{keys:?}: granted exactly the budget");
            }
        }
    }
    assert!(spent > 0, "no budget was spent");
    let (acked, failed) = tallies.iter().fold((0, 0), |(a, f), t| (a + t.acked, f + t.failed));
    eprintln!("counts: {acked} acknowledged, {failed} unavailable; {spent} budgets spent, slowest {slowest:?}");
}
