//! What the layer counts by: the client's address as a handler counts it,
//! behind trusted and untrusted proxies, a request without a key, a GCRA
//! for any key, and a closure over the request head.

use super::*;

#[tokio::test]
async fn an_address_counted_by_the_layer_is_the_one_a_handler_counts() {
    for store in [Arc::new(MemoryStore::new()) as Arc<dyn LimitStore>, Arc::new(Later(MemoryStore::new()))] {
        // `ip` normalized as an address; `client` counted as the text it is given.
        let limits = limits_on(store, &[("per-ip", "ip", 3), ("exact", "client", 3)]);
        let app = router()
            .layer(LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp::new()).unwrap())
            .layer(LimitLayer::new(limits.clone(), "exact", "client", PeerIp::new()).unwrap());
        for (peer, given, written) in [
            ("192.0.2.7", "192.0.2.7", "192.0.2.7"),
            ("::ffff:198.51.100.9", " 198.51.100.9 ", "198.51.100.9"),
            ("2001:db8:1:2:aaaa::1", "2001:DB8:1:2:ffff::9", "2001:db8:1:2::"),
        ] {
            assert_eq!(get_from(&app, peer, &[]).await.status(), StatusCode::OK);
            // The layer's count and a handler's share one budget.
            let per_ip = limits.attempt("per-ip", &[("ip", given)]).await.unwrap();
            assert_eq!(per_ip.remaining, 1, "{peer} as {given}");
            let exact = limits.attempt("exact", &[("client", written)]).await.unwrap();
            assert_eq!(exact.remaining, 1, "{peer} as {written}");
        }
    }
}

#[tokio::test]
async fn a_forwarded_header_counts_only_from_a_trusted_proxy() {
    let ip = ClientIp::trusting(["10.0.0.0/8", "fd00::/8"]).unwrap();
    let app = router().layer(LimitLayer::new(limits(&[("per-ip", "ip", 1)]), "per-ip", "ip", ip).unwrap());
    // An untrusted peer writes any address it likes: ignored, it counts as itself.
    let spoofer = "203.0.113.5";
    assert_eq!(get_from(&app, spoofer, &[("x-forwarded-for", "198.51.100.1")]).await.status(), StatusCode::OK);
    for spoof in ["198.51.100.2", "198.51.100.3, 10.0.0.1", "garbage"] {
        let r = get_from(&app, spoofer, &[("x-forwarded-for", spoof)]).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{spoof}");
    }
    // Through the trusted proxy, the client is the first untrusted address
    // from the right; what the client wrote to its left changes nothing.
    let proxy = "10.0.0.2";
    let via = |xff: &'static str| [("x-forwarded-for", xff)];
    assert_eq!(get_from(&app, proxy, &via("1.1.1.1, 198.51.100.7")).await.status(), StatusCode::OK);
    assert_eq!(get_from(&app, proxy, &via("2.2.2.2, 198.51.100.7")).await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get_from(&app, proxy, &via("198.51.100.7, 10.0.0.9")).await.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get_from(&app, proxy, &via("198.51.100.8")).await.status(), StatusCode::OK);
    // An entry that is not an address where the client should be: no key.
    assert_eq!(get_from(&app, proxy, &via("1.1.1.1, unknown, 10.0.0.9")).await.status(), StatusCode::BAD_REQUEST);
    // The proxy's own budget is not the clients'.
    assert_eq!(get_from(&app, proxy, &[]).await.status(), StatusCode::OK);
    // IPv6 clients count per /64.
    assert_eq!(get_from(&app, proxy, &via("2001:db8:1:2::1")).await.status(), StatusCode::OK);
    let r = get_from(&app, proxy, &via("2001:db8:1:2:ffff::9")).await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // Over IPv6 too, and only the configured header is read.
    let ip = ClientIp::trusting(["fd00::/8"]).unwrap().header(ForwardedHeader::Forwarded);
    let app = router().layer(LimitLayer::new(limits(&[("per-ip", "ip", 1)]), "per-ip", "ip", ip).unwrap());
    let forwarded = |v: &'static str| [("forwarded", v), ("x-forwarded-for", "192.0.2.99")];
    let first = get_from(&app, "fd00::1", &forwarded("for=192.0.2.1, for=\"[2001:db8::1]:443\";proto=https")).await;
    assert_eq!(first.status(), StatusCode::OK);
    let again = get_from(&app, "fd00::1", &forwarded("for=\"[2001:db8::2]\"")).await;
    assert_eq!(again.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn a_request_without_a_key_is_refused_or_passed_as_configured() {
    let limits = limits(&[("keyed", "client", 5), ("per-ip", "ip", 5)]);
    let key = || HeaderKey::new("x-api-key");
    let app = router().layer(LimitLayer::new(limits.clone(), "keyed", "client", key()).unwrap());
    let r = get_from(&app, "192.0.2.1", &[]).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&r, "ratelimit"), None);
    assert_eq!(body(r).await["kind"], "missing-key");
    assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", "  ")]).await.status(), StatusCode::BAD_REQUEST);

    let layer = LimitLayer::new(limits.clone(), "keyed", "client", key()).unwrap();
    let app =
        router().layer(layer.on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED)).body(RefusalBody::Plain));
    let r = get_from(&app, "192.0.2.1", &[]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(body(r).await.as_str().unwrap().contains("`client`"));

    let layer = LimitLayer::new(limits.clone(), "keyed", "client", key()).unwrap();
    let app = router().layer(layer.on_missing_key(MissingKey::Pass));
    assert_eq!(get_from(&app, "192.0.2.1", &[]).await.status(), StatusCode::OK);

    // No ConnectInfo: no peer address, no key, and a warning (once) that
    // says how to serve the router; a closure that finds nothing, no key.
    let logs = common::capture_logs();
    let app = router().layer(LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp::new()).unwrap());
    for _ in 0..2 {
        let r = app.clone().oneshot(Request::get("/items").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    let warned = logs.lines_of_kind(limit_store::layer::KIND_NO_PEER);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("into_make_service_with_connect_info"));
    let nothing = |_: &axum::http::request::Parts| None::<String>;
    let app = router().layer(LimitLayer::new(limits.clone(), "keyed", "client", nothing).unwrap());
    assert_eq!(get_from(&app, "192.0.2.1", &[]).await.status(), StatusCode::BAD_REQUEST);
    // A value an `ip` part can't take is no key either, not a 500.
    let app = router().layer(LimitLayer::new(limits.clone(), "per-ip", "ip", key()).unwrap());
    assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", "k")]).await.status(), StatusCode::BAD_REQUEST);

    // A limit or part that does not exist is refused at startup.
    assert!(LimitLayer::new(limits.clone(), "nope", "client", key()).is_err());
    assert!(LimitLayer::new(limits.clone(), "keyed", "ip", key()).is_err());
    assert!(LimitLayer::new(limits, "sign-in", "account", key()).is_err());
}

#[tokio::test]
async fn a_gcra_counted_by_the_layer_shares_its_budget_with_a_handler_for_any_key() {
    // A GCRA counts on the memory store's integer; a key too long to name in
    // the store goes through the guarded call and names a hash instead.
    let part = Part::new("client", Algorithm::gcra(3, MINUTE));
    let limits = Limits::builder()
        .store(Arc::new(MemoryStore::new()))
        .single_instance(true)
        .limit(Limit::new("bucket").part(part))
        .build()
        .unwrap();
    let app = router().layer(LimitLayer::new(limits.clone(), "bucket", "client", HeaderKey::new("x-api-key")).unwrap());
    for key in ["short".to_owned(), "k".repeat(limit_store::MAX_KEY_BYTES)] {
        let r = get_from(&app, "192.0.2.1", &[("x-api-key", &key)]).await;
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(field(header(&r, "ratelimit").unwrap(), "r", "t").1, 2, "{} bytes", key.len());
        let by_handler = limits.attempt("bucket", &[("client", &key)]).await.unwrap();
        assert_eq!(by_handler.remaining, 1, "one budget, {} bytes", key.len());
        assert_eq!(get_from(&app, "192.0.2.1", &[("x-api-key", &key)]).await.status(), StatusCode::OK);
        let r = get_from(&app, "192.0.2.1", &[("x-api-key", &key)]).await;
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "{} bytes", key.len());
        // One interval (20 s) refills one attempt: not the minute until full.
        assert_eq!(header(&r, "retry-after"), Some("20"));
        assert_eq!(field(header(&r, "ratelimit").unwrap(), "r", "t"), ("bucket".to_owned(), 0, 20));
    }
}

#[tokio::test]
async fn a_closure_over_the_head_counts_by_what_it_reads_beyond_headers() {
    // It reads the path, which only the whole head has: the layer lends it
    // the head (`NeedsParts`) and still passes the request on whole.
    let limits = limits(&[("per-tenant", "tenant", 1)]);
    let tenant = |parts: &axum::http::request::Parts| parts.uri.path().strip_prefix("/t/").map(str::to_owned);
    let app = Router::new()
        .route("/t/{tenant}", get(|request: Request<Body>| async move { request.uri().path().to_owned() }))
        .layer(LimitLayer::new(limits, "per-tenant", "tenant", tenant).unwrap());
    let get = |path: &str| app.clone().oneshot(Request::get(path).body(Body::empty()).unwrap());
    let first = get("/t/a").await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(body(first).await, "/t/a");
    assert_eq!(get("/t/a").await.unwrap().status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(get("/t/b").await.unwrap().status(), StatusCode::OK);
}
