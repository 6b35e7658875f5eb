//! Expiry on the store's own clock, the two handles' agreement on it, and sweep.

use serde_json::json;

use super::super::support::*;
use super::super::StorePair;
use crate::{Entry, Millis, Write};

const RULE_EXPIRED: &str = "an entry with expires_at <= now is not live: apply and read see None";

/// A `Put` whose `expires_at` is at or before `now` deletes the key.
pub async fn put_of_an_expired_entry_is_a_delete(pair: StorePair) -> Outcome {
    let keys = unique_keys(3);
    // Keys 0 and 1 hold live entries; key 2 is absent.
    put(&*pair.first, &keys[0], json!({"n": 1}), 600_000).await?;
    put(&*pair.first, &keys[1], json!({"n": 1}), 600_000).await?;
    let all = refs(&keys);
    answered(
        pair.second
            .update(&all, &mut |_: &[Option<Entry>], now: Millis| {
                vec![
                    Write::Put(Entry { value: json!({"n": 2}), expires_at: now }),
                    Write::Put(Entry { value: json!({"n": 2}), expires_at: now - 60_000 }),
                    Write::Put(Entry { value: json!({"n": 2}), expires_at: now - 1 }),
                ]
            })
            .await,
        "an update that puts expired entries",
    )?;
    let rule = "Put of an entry already expired is a delete";
    let got = read(&*pair.first, &all).await?;
    ensure(got.iter().all(Option::is_none), rule, "[None, None, None]", || show(&got))?;
    let (seen, _) = seen_by_apply(&*pair.second, &all).await?;
    ensure(seen.iter().all(Option::is_none), rule, "apply sees [None, None, None]", || show(&seen))
}

/// An entry is live until its `expires_at` on the store's clock, then `None`
/// to both `read` and `apply`, and a new entry can take its place.
pub async fn entry_expires_on_the_store_clock(pair: StorePair) -> Outcome {
    let keys = unique_keys(1);
    let key = [keys[0].as_str()];
    let written = put(&*pair.first, key[0], json!({"n": 5}), 1_500).await?;
    let got = read(&*pair.first, &key).await?;
    ensure(
        got[0].as_ref() == Some(&written),
        "an entry is live while now < expires_at",
        format!("{written:?}"),
        || show(&got),
    )?;
    wait_for_store_clock(&*pair.first, written.expires_at).await?;
    for handle in [&pair.first, &pair.second] {
        let got = read(&**handle, &key).await?;
        ensure(got[0].is_none(), RULE_EXPIRED, "read sees None after expiry", || show(&got))?;
        let (seen, now) = seen_by_apply(&**handle, &key).await?;
        ensure(seen[0].is_none(), RULE_EXPIRED, format!("apply sees None at now={now}"), || show(&seen))?;
    }
    // The expired entry must not come back, and a new one takes its place.
    increment(&*pair.second, &key).await?;
    let got = read(&*pair.first, &key).await?;
    ensure(count(&got[0]) == 1, "a key whose entry expired starts afresh", "count 1", || show(&got))
}

/// Both handles judge one entry by the same clock: live through the second
/// while the first's clock says it is, gone through the second once the
/// first's clock passes its expiry.
pub async fn handles_agree_on_the_clock(pair: StorePair) -> Outcome {
    let rule = "two handles on one shared store agree on the clock";
    let keys = unique_keys(1);
    let key = [keys[0].as_str()];
    let written = put(&*pair.first, key[0], json!({"n": 1}), 2_000).await?;
    let got = read(&*pair.second, &key).await?;
    ensure(got[0].as_ref() == Some(&written), rule, "live through the second handle before expiry", || show(&got))?;
    let (seen, now) = seen_by_apply(&*pair.second, &key).await?;
    ensure(
        seen[0].as_ref() == Some(&written),
        rule,
        format!("apply through the second handle sees it live (now={now})"),
        || show(&seen),
    )?;
    // Past expiry on the first handle's clock (with 100 ms for the read's own trip).
    wait_for_store_clock(&*pair.first, written.expires_at + 100).await?;
    let got = read(&*pair.second, &key).await?;
    ensure(got[0].is_none(), rule, "gone through the second handle once the first's clock passed expiry", || {
        show(&got)
    })?;
    let (seen, now) = seen_by_apply(&*pair.second, &key).await?;
    ensure(seen[0].is_none(), rule, format!("apply through the second handle sees None (its now={now})"), || {
        show(&seen)
    })
}

/// `sweep` removes expired entries, counts at least those it removed, and never
/// removes a live entry; what it counted is really gone, so a second sweep
/// does not find it again. (Run the pair without a background sweeper: one
/// racing this case could remove its entries first.)
pub async fn sweep_removes_expired_and_keeps_live(pair: StorePair) -> Outcome {
    // More than other cases on a shared server let expire at once, so a second
    // sweep that finds this many again found these.
    const SHORT: usize = 40;
    let short = unique_keys(SHORT);
    let long = unique_keys(2);
    let mut last_expiry = 0;
    for (i, chunk) in short.chunks(crate::MAX_KEYS).enumerate() {
        let handle = if i % 2 == 0 { &pair.first } else { &pair.second };
        let mut expiry = 0;
        let mut put_all = |current: &[Option<Entry>], now: Millis| {
            expiry = now + 300;
            vec![Write::Put(Entry { value: json!({"n": i}), expires_at: now + 300 }); current.len()]
        };
        answered(handle.update(&refs(chunk), &mut put_all).await, "an update that puts entries")?;
        last_expiry = last_expiry.max(expiry);
    }
    let mut live = Vec::new();
    for key in &long {
        live.push(Some(put(&*pair.second, key, json!({"n": 1}), 600_000).await?));
    }
    wait_for_store_clock(&*pair.first, last_expiry).await?;
    let removed = answered(pair.first.sweep().await, "sweep")?;
    ensure(
        removed >= SHORT as u64,
        "sweep removes expired entries and answers how many went",
        format!("at least the {SHORT} entries this case let expire"),
        || format!("sweep answered {removed}"),
    )?;
    let got = read(&*pair.second, &refs(&long)).await?;
    ensure(got == live, "sweep removes only expired entries", show(&live), || show(&got))?;
    for chunk in short.chunks(crate::MAX_KEYS) {
        let got = read(&*pair.second, &refs(chunk)).await?;
        ensure(got.iter().all(Option::is_none), RULE_EXPIRED, "the swept entries are gone", || show(&got))?;
    }
    // What the first sweep counted is gone: a second one does not find it again.
    let again = answered(pair.second.sweep().await, "sweep")?;
    ensure(
        again < SHORT as u64,
        "sweep removes the expired entries it counts",
        format!("a second sweep finds fewer than the {SHORT} entries the first one removed"),
        || format!("the second sweep answered {again}"),
    )?;
    let got = read(&*pair.first, &refs(&long)).await?;
    ensure(got == live, "sweep removes only expired entries", show(&live), || show(&got))
}
