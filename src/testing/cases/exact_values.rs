//! Values compare exactly: a store that checks "is the entry still as
//! `apply` saw it" must compare bytes, not text under a collation that folds
//! case or accents, or an update acknowledged in between is lost.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;

use super::super::support::*;
use super::super::{ContractViolation, StorePair};
use crate::{update_with, Entry, Millis, StoreError, Write};

const RULE: &str = "an update writes only over the entry its apply saw: values compare as bytes, not by case or accent";

/// Handle 1 reads a value; while its `apply` runs, handle 2 replaces it with
/// one that differs only by case (then by accent) and is acknowledged (or, on
/// a store that locks, waits). Handle 2's update must never be lost: either
/// handle 1's `apply` runs again and sees it, or handle 2 runs after handle 1.
/// The race needs a multi-thread runtime; on a current-thread one the two run
/// one after the other and the case checks only the outcome.
pub async fn values_differing_only_by_case_or_accent_are_not_confused(pair: StorePair) -> Outcome {
    let racing = Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    for (before, after) in [(json!({"t": "a"}), json!({"t": "A"})), (json!({"s": "é"}), json!({"s": "e"}))] {
        let key = unique_keys(1).remove(0);
        put(&*pair.first, &key, before.clone(), 60_000).await?;
        let (told, acknowledged) = oneshot::channel::<Result<(), StoreError>>();
        let mut told = Some(told);
        let second = pair.second.clone();
        let saw_last = update_with(&*pair.first, &[key.as_str()], |current, now| {
            if let Some(told) = told.take() {
                let (second, key, after) = (second.clone(), key.clone(), after.clone());
                let race = async move {
                    // The same expiry: only the value tells the two entries apart.
                    let mut put_after = |current: &[Option<Entry>], now: Millis| {
                        let expires_at = current[0].as_ref().map_or(now + 60_000, |e| e.expires_at);
                        vec![Write::Put(Entry { value: after.clone(), expires_at })]
                    };
                    let _ = told.send(second.update(&[key.as_str()], &mut put_after).await);
                };
                tokio::spawn(race);
                if racing {
                    // Give it time to be acknowledged; a store that locks keeps it waiting.
                    tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(300)));
                }
            }
            let seen = current[0].as_ref().map(|e| e.value.clone()).unwrap_or(Value::Null);
            let mine = json!({"by": "first", "saw": seen});
            (vec![Write::Put(Entry { value: mine, expires_at: now + 60_000 })], seen)
        })
        .await;
        let saw_last = answered(saw_last, "handle 1's update")?;
        let second_answer = match tokio::time::timeout(Duration::from_secs(10), acknowledged).await {
            Ok(Ok(answer)) => answer.map_err(|e| e.to_string()),
            _ => return Err(ContractViolation::new(RULE_ANSWERS, "handle 2's update answers", "no answer in 10 s")),
        };
        let got = read(&*pair.second, &[key.as_str()]).await?;
        let stored = got[0].as_ref().map(|e| e.value.clone()).unwrap_or(Value::Null);
        let explained = if stored == after {
            true // handle 2 ran last
        } else if stored.get("by") == Some(&json!("first")) {
            // Handle 1 ran last: over handle 2's write if that was acknowledged.
            second_answer.is_err() || stored["saw"] == after
        } else {
            false
        };
        ensure(
            explained,
            RULE,
            format!("{after} (handle 2 last), or handle 1's write over it, after handle 2 answered {second_answer:?}"),
            || format!("{stored}, handle 1's last apply saw {saw_last}"),
        )?;
    }
    Ok(())
}
