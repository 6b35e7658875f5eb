//! What the layer answers: allowed then limited with its fields (on either
//! store path), the policy under an unavailable store, stacked layers,
//! fields on refusals only, and a custom body.

use super::*;

#[tokio::test]
async fn allowed_then_limited_with_retry_after_and_fields() {
    allowed_then_limited(Arc::new(MemoryStore::new())).await;
}

#[tokio::test]
async fn a_store_answering_through_futures_gets_the_same_answers() {
    allowed_then_limited(Arc::new(Later(MemoryStore::new()))).await;
}

async fn allowed_then_limited(store: Arc<dyn LimitStore>) {
    let limits = limits_on(store, &[("keyed", "client", 2)]);
    let layer = LimitLayer::new(limits, "keyed", "client", HeaderKey::new("x-api-key"));
    let app = router().layer(layer.unwrap());
    for left in [1, 0] {
        let r = get_from(&app, "192.0.2.1", &[("x-api-key", "k1")]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(field(header(&r, "ratelimit-policy").unwrap(), "q", "w"), ("keyed".into(), 2, 60));
        let (name, remaining, reset) = field(header(&r, "ratelimit").unwrap(), "r", "t");
        assert_eq!((name.as_str(), remaining), ("keyed", left));
        assert!((59..=60).contains(&reset), "{reset}");
        assert_eq!(header(&r, "retry-after"), None);
        assert_eq!(body(r).await, "items");
    }
    let r = get_from(&app, "192.0.2.1", &[("x-api-key", "k1")]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: i64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((59..=60).contains(&retry), "{retry}");
    let (_, remaining, reset) = field(header(&r, "ratelimit").unwrap(), "r", "t");
    assert_eq!((remaining, reset), (0, retry));
    let json = body(r).await;
    assert_eq!((json["kind"].as_str(), json["limit"].as_str()), (Some("limited"), Some("keyed")));
    assert_eq!(json["retry_after"].as_i64(), Some(retry));
    // Another key has its own budget.
    assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", "k2")]).await.status(), StatusCode::OK);
}

/// Answers every call unavailable.
struct Down;

#[async_trait::async_trait]
impl LimitStore for Down {
    fn shared(&self) -> bool {
        true
    }
    async fn update(&self, _: &[&str], _: &mut Apply<'_>) -> Result<(), StoreError> {
        Err(StoreError::unavailable(Unavailable::StoreFailed, "down for the test"))
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        Ok(vec![None; keys.len()])
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[tokio::test]
async fn an_unavailable_store_answers_by_the_limits_policy() {
    let store: Arc<dyn LimitStore> = Arc::new(Down);
    let part = || Part::new("client", Algorithm::fixed_window(5, MINUTE));
    let limits = Limits::builder()
        .store(store)
        .limit(Limit::new("denies").part(part()).policy(Policy::Deny))
        .limit(Limit::new("allows").part(part()).policy(Policy::Allow))
        .build()
        .unwrap();
    let key = || HeaderKey::new("x-api-key");
    let denying = router().layer(LimitLayer::new(limits.clone(), "denies", "client", key()).unwrap());
    let r = get_from(&denying, "192.0.2.1", &[("x-api-key", "k")]).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(header(&r, "ratelimit-policy").is_some());
    assert_eq!(header(&r, "retry-after"), None);
    assert_eq!(body(r).await["kind"], "store-unavailable");

    // The handler helper answers the same way.
    let refused = limit_store::layer::attempt(&limits, "denies", &[("client", "k")]).await.unwrap_err();
    assert_eq!((refused.status(), refused.kind()), (StatusCode::SERVICE_UNAVAILABLE, "store-unavailable"));
    assert!(limit_store::layer::attempt(&limits, "allows", &[("client", "k")]).await.is_ok());

    let allowing = router().layer(LimitLayer::new(limits.clone(), "allows", "client", key()).unwrap());
    let r = get_from(&allowing, "192.0.2.1", &[("x-api-key", "k")]).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(body(r).await, "items");
    assert_eq!(limits.counters("allows").unwrap().degraded, 2);
}

#[tokio::test]
async fn stacked_layers_each_count_and_each_add_their_fields() {
    let limits = limits(&[("keyed", "client", 3), ("per-ip", "ip", 2)]);
    let app = router()
        .layer(LimitLayer::new(limits.clone(), "keyed", "client", HeaderKey::new("x-api-key")).unwrap())
        .layer(LimitLayer::new(limits, "per-ip", "ip", PeerIp).unwrap());
    let r = get_from(&app, "192.0.2.1", &[("x-api-key", "a")]).await;
    assert_eq!(r.status(), StatusCode::OK);
    let names: Vec<String> = all(&r, "ratelimit-policy").iter().map(|v| field(v, "q", "w").0).collect();
    assert_eq!(names, ["keyed", "per-ip"]);
    let left: Vec<i64> = all(&r, "ratelimit").iter().map(|v| field(v, "r", "t").1).collect();
    assert_eq!(left, [2, 1]);
    // The per-IP limit refuses another key from the same address.
    assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", "b")]).await.status(), StatusCode::OK);
    let r = get_from(&app, "192.0.2.1", &[("x-api-key", "c")]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body(r).await["limit"], "per-ip");
    // The key limit refuses key `a` from other addresses after its 3.
    assert_eq!(get_from(&app, "192.0.2.2", &[("x-api-key", "a")]).await.status(), StatusCode::OK);
    assert_eq!(get_from(&app, "192.0.2.3", &[("x-api-key", "a")]).await.status(), StatusCode::OK);
    let r = get_from(&app, "192.0.2.4", &[("x-api-key", "a")]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(all(&r, "ratelimit-policy").len(), 2, "the outer layer's fields join the inner refusal's");
    assert_eq!(body(r).await["limit"], "keyed");
}

#[tokio::test]
async fn fields_on_refusals_only_still_count_and_still_refuse_with_them() {
    let stores: [Arc<dyn LimitStore>; 2] = [Arc::new(MemoryStore::new()), Arc::new(Later(MemoryStore::new()))];
    for store in stores {
        let limits = limits_on(store, &[("keyed", "client", 2)]);
        let layer = LimitLayer::new(limits.clone(), "keyed", "client", HeaderKey::new("x-api-key"));
        let app = router().layer(layer.unwrap().fields_on_admitted(false));
        for _ in 0..2 {
            let r = get_from(&app, "192.0.2.1", &[("x-api-key", "k")]).await;
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!((header(&r, "ratelimit"), header(&r, "ratelimit-policy")), (None, None));
        }
        let r = get_from(&app, "192.0.2.1", &[("x-api-key", "k")]).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        let retry: i64 = header(&r, "retry-after").unwrap().parse().unwrap();
        assert_eq!(field(header(&r, "ratelimit").unwrap(), "r", "t"), ("keyed".into(), 0, retry));
        assert_eq!(field(header(&r, "ratelimit-policy").unwrap(), "q", "w"), ("keyed".into(), 2, 60));
        let counted = limits.counters("keyed").map(|c| (c.allowed, c.limited));
        assert_eq!(counted, Some((2, 1)), "admitted requests are tallied, with no decision made for them");
    }
    // The same by the client's address, counted from the address itself.
    let limits = limits(&[("per-ip", "ip", 1)]);
    let layer = LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp).unwrap();
    let app = router().layer(layer.fields_on_admitted(false));
    let r = get_from(&app, "192.0.2.9", &[]).await;
    assert_eq!((r.status(), header(&r, "ratelimit")), (StatusCode::OK, None));
    let r = get_from(&app, "192.0.2.9", &[]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(field(header(&r, "ratelimit").unwrap(), "r", "t").1, 0);
    assert_eq!(limits.counters("per-ip").map(|c| (c.allowed, c.limited)), Some((1, 1)));
}

#[tokio::test]
async fn a_custom_body_keeps_the_status_and_the_fields() {
    let custom = RefusalBody::Custom(Arc::new(|refusal: &limit_store::layer::Refusal| {
        let wait = refusal.decision().and_then(|d| d.retry_after).map_or(0, |r| r.as_secs());
        axum::response::IntoResponse::into_response(format!("slow down ({}, {wait} s)", refusal.kind()))
    }));
    let layer = LimitLayer::new(limits(&[("keyed", "client", 1)]), "keyed", "client", HeaderKey::new("x-api-key"));
    let app = router().layer(layer.unwrap().body(custom));
    assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", "k")]).await.status(), StatusCode::OK);
    let r = get_from(&app, "192.0.2.1", &[("x-api-key", "k")]).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(header(&r, "retry-after").is_some() && header(&r, "ratelimit").is_some());
    assert!(body(r).await.as_str().unwrap().starts_with("slow down (limited, "));
}
