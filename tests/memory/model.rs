//! `MemoryStore` against a model: random sequences of updates, reads, sweeps and
//! clock steps give the same live entries as a plain map judged by hand.

use std::collections::HashMap;
use std::sync::Arc;

use limit_store::clock::ManualClock;
use limit_store::{Entry, LimitStore, MemoryStore, Millis, Write};
use proptest::prelude::*;

const KEYS: [&str; 5] = ["a", "b", "c", "a-very-long-key-that-the-store-holds-as-its-digest-instead-of-in-full-0", "é"];

#[derive(Clone, Debug)]
enum Op {
    /// Keys (indices into KEYS, distinct) and one write per key.
    Update(Vec<(usize, W)>),
    Read(Vec<usize>),
    Advance(i64),
    Sweep,
}

#[derive(Clone, Debug)]
enum W {
    Keep,
    Put(usize, i64, i64), // the value's kind (see `value`), the value, ttl (may be <= 0: already expired)
    Delete,
}

fn op() -> impl Strategy<Value = Op> {
    let write = prop_oneof![
        Just(W::Keep),
        (0..KINDS, 0i64..100, -50i64..200).prop_map(|(kind, v, t)| W::Put(kind, v, t)),
        Just(W::Delete)
    ];
    prop_oneof![
        4 => proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 1..=3)
            .prop_flat_map(move |keys| {
                let n = keys.len();
                (Just(keys), proptest::collection::vec(write.clone(), n))
            })
            .prop_map(|(keys, writes)| Op::Update(keys.into_iter().zip(writes).collect())),
        2 => proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 1..=5).prop_map(Op::Read),
        2 => (0i64..120).prop_map(Op::Advance),
        1 => Just(Op::Sweep),
    ]
}

/// Kinds of value: the store holds an integer in one table and the rest in
/// another, so a key whose value changes kind moves between them.
const KINDS: usize = 5;

/// A value of `kind` made from `v`.
fn value(kind: usize, v: i64) -> serde_json::Value {
    match kind {
        0 => v.into(),
        1 => serde_json::json!({ "n": v }),
        2 => serde_json::json!(v as f64 + 0.5),
        3 => serde_json::json!([v, v + 1]),
        _ => serde_json::json!("x".repeat(40 + usize::try_from(v).unwrap_or(0))),
    }
}

fn live(model: &HashMap<&str, Entry>, key: &str, now: Millis) -> Option<Entry> {
    model.get(key).filter(|e| e.expires_at > now).cloned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn memory_store_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let clock = ManualClock::new(1_000);
            let store = MemoryStore::with_clock(1_000, Arc::new(clock.clone()));
            let mut model: HashMap<&str, Entry> = HashMap::new();
            let mut now: Millis = 1_000;
            for op in ops {
                match op {
                    Op::Update(plan) => {
                        let keys: Vec<&str> = plan.iter().map(|(k, _)| KEYS[*k]).collect();
                        let want: Vec<Option<Entry>> = keys.iter().map(|k| live(&model, k, now)).collect();
                        let mut seen = None;
                        store.update(&keys, &mut |cur: &[Option<Entry>], at: Millis| {
                            seen = Some((cur.to_vec(), at));
                            plan.iter().map(|(_, w)| match w {
                                W::Keep => Write::Keep,
                                W::Put(kind, v, ttl) => Write::Put(Entry { value: value(*kind, *v), expires_at: at + ttl }),
                                W::Delete => Write::Delete,
                            }).collect()
                        }).await.unwrap();
                        let (seen, at) = seen.unwrap();
                        assert_eq!(at, now);
                        assert_eq!(seen, want, "apply's view of {keys:?}");
                        for (k, w) in &plan {
                            match w {
                                W::Keep => {}
                                W::Put(kind, v, ttl) => { model.insert(KEYS[*k], Entry { value: value(*kind, *v), expires_at: now + ttl }); }
                                W::Delete => { model.remove(KEYS[*k]); }
                            }
                        }
                    }
                    Op::Read(ks) => {
                        let keys: Vec<&str> = ks.iter().map(|k| KEYS[*k]).collect();
                        let want: Vec<Option<Entry>> = keys.iter().map(|k| live(&model, k, now)).collect();
                        assert_eq!(store.read(&keys).await.unwrap(), want, "read of {keys:?}");
                    }
                    Op::Advance(ms) => {
                        now += ms;
                        clock.set(now);
                    }
                    Op::Sweep => {
                        store.sweep().await.unwrap();
                        model.retain(|_, e| e.expires_at > now);
                        assert_eq!(store.stats().unwrap().held, model.len() as u64, "after a sweep only live entries are held");
                    }
                }
                let live_count = model.values().filter(|e| e.expires_at > now).count() as u64;
                assert!(store.stats().unwrap().held >= live_count, "every live entry is held");
            }
        });
    }
}
