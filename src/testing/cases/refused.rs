//! Refused input: each bad call fails with a refused-input error and writes
//! nothing; the edges of what is allowed still work.

use serde_json::{json, Value};

use super::super::support::*;
use super::super::{ContractViolation, StorePair};
use crate::{Entry, LimitStore, Millis, StoreError, Write, MAX_KEYS, MAX_KEY_BYTES, MAX_VALUE_BYTES};

/// Fails unless `result` is a refused-input error.
fn refused(result: Result<(), StoreError>, rule: &'static str) -> Outcome {
    match result {
        Err(e) if e.is_refused() => Ok(()),
        Err(e) => Err(ContractViolation::new(rule, "a refused-input error", format!("another error: {e}"))),
        Ok(()) => Err(ContractViolation::new(rule, "a refused-input error", "Ok")),
    }
}

/// Tries to put `{"n": 99}` under every key.
async fn try_put_all(store: &dyn LimitStore, keys: &[&str]) -> Result<(), StoreError> {
    store
        .update(keys, &mut |current: &[Option<Entry>], now: Millis| {
            current.iter().map(|_| Write::Put(Entry { value: json!({"n": 99}), expires_at: now + 600_000 })).collect()
        })
        .await
}

/// Fails unless every one of `keys` (valid ones) is still absent.
async fn nothing_written(pair: &StorePair, keys: &[&str], rule: &'static str) -> Outcome {
    for chunk in keys.chunks(MAX_KEYS) {
        let got = read(&*pair.second, chunk).await?;
        ensure(got.iter().all(Option::is_none), rule, "nothing written", || show(&got))?;
    }
    Ok(())
}

/// The largest call the contract allows works: 32 keys, a 1024-byte key, a
/// 4096-byte value, and a key of any UTF-8.
pub async fn limits_of_the_contract_are_accepted(pair: StorePair) -> Outcome {
    let rule = "keys: 1 to 32 per call, each 1 to 1024 bytes, any UTF-8; values up to 4096 bytes";
    let mut keys = unique_keys(MAX_KEYS);
    let mut long = format!("{}:", keys[0]);
    while long.len() + 'λ'.len_utf8() <= MAX_KEY_BYTES {
        long.push('λ');
    }
    while long.len() < MAX_KEY_BYTES {
        long.push('x');
    }
    keys[1] = long;
    keys[2] = format!("{}:ключ/🔑 with spaces\ttab", keys[0]);
    let all = refs(&keys);
    let result = try_put_all(&*pair.first, &all).await;
    ensure(result.is_ok(), rule, "32 keys, one of 1024 bytes, are accepted", || format!("{result:?}"))?;
    let got = read(&*pair.second, &all).await?;
    ensure(got.iter().all(|e| count(e) == 99), rule, "every key written", || show(&got))?;
    // A value of exactly 4096 bytes serialized: "x...x" with its two quotes.
    let big = Value::String("x".repeat(MAX_VALUE_BYTES - 2));
    let written = put(&*pair.second, &keys[3], big, 600_000).await?;
    let got = read(&*pair.first, &[keys[3].as_str()]).await?;
    ensure(got[0].as_ref() == Some(&written), rule, "a 4096-byte value is stored", || "another value".into())
}

/// A call with no keys is refused.
pub async fn no_keys_are_refused(pair: StorePair) -> Outcome {
    let rule = "a call names 1 to 32 keys";
    refused(try_put_all(&*pair.first, &[]).await, rule)?;
    match pair.first.read(&[]).await {
        Err(e) if e.is_refused() => Ok(()),
        other => Err(ContractViolation::new(rule, "read of no keys refused", format!("{other:?}"))),
    }
}

/// A call with 33 keys is refused and writes none of them.
pub async fn too_many_keys_are_refused(pair: StorePair) -> Outcome {
    let rule = "a call names at most 32 keys; more is refused with nothing written";
    let keys = unique_keys(MAX_KEYS + 1);
    let all = refs(&keys);
    refused(try_put_all(&*pair.first, &all).await, rule)?;
    match pair.first.read(&all).await {
        Err(e) if e.is_refused() => {}
        other => return Err(ContractViolation::new(rule, "read of 33 keys refused", format!("{other:?}"))),
    }
    nothing_written(&pair, &all, rule).await
}

/// The same key twice in one call is refused, with nothing written.
pub async fn duplicate_keys_are_refused(pair: StorePair) -> Outcome {
    let rule = "no key twice in one call; a repeat is refused with nothing written";
    let keys = unique_keys(2);
    let dup = [keys[0].as_str(), keys[1].as_str(), keys[0].as_str()];
    refused(try_put_all(&*pair.first, &dup).await, rule)?;
    nothing_written(&pair, &refs(&keys), rule).await
}

/// An empty key and a 1025-byte key are refused, and the valid keys beside
/// them are not written.
pub async fn empty_and_long_keys_are_refused(pair: StorePair) -> Outcome {
    let rule = "each key is 1 to 1024 bytes; others are refused with nothing written";
    let keys = unique_keys(1);
    let long = format!("{}{}", keys[0], "k".repeat(MAX_KEY_BYTES + 1 - keys[0].len()));
    refused(try_put_all(&*pair.first, &[keys[0].as_str(), long.as_str()]).await, rule)?;
    refused(try_put_all(&*pair.first, &[keys[0].as_str(), ""]).await, rule)?;
    nothing_written(&pair, &[keys[0].as_str()], rule).await
}

/// A value over 4096 bytes is refused, and no key of the call is written, not
/// even one with a small value; an entry already there is left as it was.
pub async fn oversized_value_is_refused(pair: StorePair) -> Outcome {
    let rule = "a value over 4096 bytes serialized is refused, with nothing written";
    let keys = unique_keys(3);
    let before = put(&*pair.first, &keys[0], json!({"n": 1}), 600_000).await?;
    let all = refs(&keys);
    let result = pair
        .second
        .update(&all, &mut |_: &[Option<Entry>], now: Millis| {
            let entry = |value| Write::Put(Entry { value, expires_at: now + 600_000 });
            vec![entry(json!({"n": 2})), entry(json!({"n": 2})), entry(Value::String("x".repeat(MAX_VALUE_BYTES - 1)))]
        })
        .await;
    refused(result, rule)?;
    let got = read(&*pair.first, &all).await?;
    let want = vec![Some(before), None, None];
    ensure(got == want, rule, show(&want), || show(&got))
}

/// `apply` answering fewer or more writes than keys fails the call, nothing written.
pub async fn wrong_number_of_writes_is_refused(pair: StorePair) -> Outcome {
    let rule = "apply returns exactly one Write per key; otherwise the call fails with nothing written";
    let keys = unique_keys(2);
    let all = refs(&keys);
    for n in [0usize, 1, 3] {
        let result = pair
            .first
            .update(&all, &mut |_: &[Option<Entry>], now: Millis| {
                vec![Write::Put(Entry { value: json!({"n": 1}), expires_at: now + 600_000 }); n]
            })
            .await;
        refused(result, rule)?;
    }
    nothing_written(&pair, &all, rule).await
}

/// An `apply` that panics writes nothing, and the store keeps working for the
/// same keys and others.
pub async fn panicking_apply_writes_nothing_and_store_keeps_working(pair: StorePair) -> Outcome {
    let rule = "an apply that panics writes nothing and does not poison the store";
    let keys = unique_keys(3);
    let before = put(&*pair.first, &keys[0], json!({"n": 1}), 600_000).await?;
    let first = pair.first.clone();
    let doomed = keys.clone();
    let outcome = tokio::spawn(async move {
        let doomed = refs(&doomed[..2]);
        first
            .update(&doomed, &mut |_: &[Option<Entry>], _: Millis| -> Vec<Write> {
                // Unwinds as a panic does, past the panic hook: a runner's
                // output shows no panic the suite caused on purpose.
                std::panic::resume_unwind(Box::new(String::from("limit-store contract: this apply panics on purpose")))
            })
            .await
    })
    .await;
    if let Ok(Ok(())) = outcome {
        return Err(ContractViolation::new(rule, "the call fails (an error or the panic)", "Ok"));
    }
    let two = refs(&keys[..2]);
    let got = read(&*pair.second, &two).await?;
    let want = vec![Some(before), None];
    ensure(got == want, rule, show(&want), || show(&got))?;
    increment(&*pair.first, &two).await?;
    increment(&*pair.second, &[keys[2].as_str()]).await?;
    let got = read(&*pair.first, &refs(&keys)).await?;
    let counts: Vec<u64> = got.iter().map(count).collect();
    ensure(counts == [2, 1, 1], rule, "counts [2, 1, 1] after the panic", || format!("{counts:?}"))
}
