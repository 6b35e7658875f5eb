//! Each family of keys (a limit: the text before a key's first `:`) has a
//! share of the memory store's bound, so a flood of new keys in one leaves
//! the others counting: through `Limits`, and on the store alone with an
//! app's own `update_with` keys. On a manual clock, never sleeping.

use std::sync::Arc;
use std::time::Duration;

use limit_store::clock::ManualClock;
use limit_store::error::Unavailable;
use limit_store::{update_with, Entry, LimitStore, Limits, MemoryStore, Millis, StoreError, Write};

const T0: Millis = 1_700_000_000_000;

/// A flood of new `api` clients (one /48's /64s) fills `api`'s share, 80% of
/// the bound; past it `api` answers new clients by its policy (allowed,
/// degraded `full`) and keeps counting the clients it holds, while
/// `sign-in` goes on counting new accounts, to the point of limiting one.
#[tokio::test]
async fn a_flood_on_api_fills_its_share_and_sign_in_keeps_counting_new_accounts() {
    let logs = crate::common::capture_logs();
    let clock = ManualClock::new(T0);
    let store = Arc::new(MemoryStore::with_clock(1_000, Arc::new(clock.clone())));
    let limits = Limits::builder().store(store.clone()).single_instance(true).build().unwrap();
    let mut degraded = 0;
    for i in 0..2_000 {
        let client = format!("2001:db8:1:{i:x}::/64");
        let d = limits.attempt("api", &[("client", &client)]).await.unwrap();
        assert!(d.allowed, "api allows when its store is unavailable");
        match d.degraded {
            None => {}
            Some(Unavailable::Full) => degraded += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(degraded, 1_200, "api counted 800 new clients, then answered by its policy");
    assert_eq!(store.stats().unwrap().held, 800);
    let held = limits.attempt("api", &[("client", "2001:db8:1:0::/64")]).await.unwrap();
    assert_eq!(held.degraded, None, "a client api holds keeps counting");

    for i in 0..40 {
        let (account, ip) = (format!("user{i}@example.com"), format!("192.0.2.{i}"));
        let d = limits.attempt("sign-in", &[("account", &account), ("ip", &ip)]).await.unwrap();
        assert_eq!((d.allowed, d.degraded), (true, None), "new account {i} counted");
    }
    let user0 = [("account", "user0@example.com"), ("ip", "192.0.2.0")];
    for n in 2..=5 {
        assert!(limits.attempt("sign-in", &user0).await.unwrap().allowed, "attempt {n} of 5");
    }
    let locked = limits.attempt("sign-in", &user0).await.unwrap();
    assert_eq!((locked.allowed, locked.degraded, locked.limited_by), (false, None, Some("account")));
    let reset = limits.attempt("password-reset", &[("account", "ada@example.com"), ("ip", "192.0.2.9")]).await;
    assert_eq!(reset.unwrap().degraded, None, "a third limit counts too");

    let share = logs.lines_of_kind("limit-store-full");
    assert_eq!(share.len(), 1, "once a minute: {share:#?}");
    assert!(share[0].contains(r#"family="api""#) && share[0].contains("held=800"), "{share:#?}");
    assert!(!share[0].contains("2001:db8"), "never a key's value: {share:#?}");
}

/// Counts one on each of `keys`, live for a minute.
async fn count(store: &MemoryStore, keys: &[&str]) -> Result<(), StoreError> {
    update_with(store, keys, |current, now| {
        let writes = current
            .iter()
            .map(|e| {
                let n = e.as_ref().and_then(|e| e.value.as_u64()).unwrap_or(0) + 1;
                Write::Put(Entry { value: n.into(), expires_at: e.as_ref().map_or(now + 60_000, |e| e.expires_at) })
            })
            .collect();
        (writes, ())
    })
    .await
}

/// New keys of `family` counted until one is refused: how many were.
async fn fill(store: &MemoryStore, family: &str) -> (u64, StoreError) {
    for n in 0.. {
        if let Err(e) = count(store, &[&format!("{family}:{n}")]).await {
            return (n, e);
        }
    }
    unreachable!()
}

/// An app's own keys share the bound by the text before their first `:`,
/// and keys without one are one family: a full share refuses only its own
/// family's new keys (a whole update, atomically), names the family and
/// not the key, and takes keys again when its entries are removed or expire.
#[tokio::test]
async fn an_apps_own_keys_share_the_bound_by_family() {
    let logs = crate::common::capture_logs();
    let clock = ManualClock::new(T0);
    let store = MemoryStore::with_clock(100, Arc::new(clock.clone()));
    let (tenant_a, full) = fill(&store, "tenant-a").await;
    assert_eq!(tenant_a, 80, "alone, a family stops at 80% of the bound");
    assert!(matches!(full, limit_store::StoreError::Unavailable { reason: Unavailable::Full, .. }));
    assert!(full.to_string().contains("`tenant-a`") && !full.to_string().contains("tenant-a:80"), "{full}");
    let (tenant_b, _) = fill(&store, "tenant-b").await;
    assert_eq!(tenant_b, 10, "half of the 20 left");
    let mut no_colon = 0;
    while count(&store, &[&format!("plain-{no_colon}")]).await.is_ok() {
        no_colon += 1;
    }
    assert_eq!(no_colon, 5, "keys without a colon are one family, with a share of its own");
    assert_eq!(store.stats().unwrap().held, 95);

    let both = count(&store, &["tenant-a:new", "tenant-c:new"]).await.unwrap_err();
    assert!(both.to_string().contains("`tenant-a`"), "{both}");
    let read = store.read(&["tenant-a:new", "tenant-c:new"]).await.unwrap();
    assert_eq!(read, vec![None, None], "an update refused for one key writes none");
    count(&store, &["tenant-a:0", "tenant-c:new"]).await.expect("a held key and another family's new one");

    // Removed entries give their places back to their own family: with 1
    // left of its 10, tenant-b adds 6 (had it kept its 10, it would add 1).
    for n in 0..9 {
        let key = format!("tenant-b:{n}");
        store.update(&[&key], &mut |_: &[Option<Entry>], _| vec![Write::Delete]).await.unwrap();
    }
    assert_eq!(fill(&store, "tenant-b").await.0, 6);
    // And so do swept ones: once every entry has gone, tenant-a's share is
    // judged on nothing held.
    clock.advance(Duration::from_secs(61));
    assert_eq!(store.sweep().await.unwrap(), 93);
    assert_eq!(fill(&store, "tenant-b").await.0, 80);
    assert_eq!(fill(&store, "tenant-a").await.0, 10, "half of the 20 left, as a family holding nothing");

    let share = logs.lines_of_kind("limit-store-full");
    let named = |family: &str| share.iter().filter(|l| l.contains(&format!("family={family:?}"))).count();
    assert_eq!(share.len(), 3, "once a minute per family, each refused many times: {share:#?}");
    assert_eq!((named("tenant-a"), named("tenant-b"), named("(keys without ':')")), (1, 1, 1), "{share:#?}");
}

/// Inventing family names grows nothing: past the families a store names,
/// every new one counts as one family, and a family named before the flood
/// keeps its own share.
#[tokio::test]
async fn invented_families_share_one_count() {
    let store = MemoryStore::with_clock(10_000, Arc::new(ManualClock::new(T0)));
    count(&store, &["tenant-b:first"]).await.unwrap();
    let mut admitted = 0;
    for i in 0..20_000 {
        if count(&store, &[&format!("invented-{i}:x")]).await.is_ok() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 7_999, "the invented families stop at 80% of the bound, as one would");
    let (tenant_b, _) = fill(&store, "tenant-b").await;
    assert!(tenant_b > 900, "a family named before the flood keeps counting: {tenant_b}");
}
