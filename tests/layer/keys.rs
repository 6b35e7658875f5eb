//! What the layer counts by: the client's address as a handler counts it,
//! behind trusted and untrusted proxies, a request without a key, a GCRA
//! for any key, and a closure over the request head.

use super::*;

#[tokio::test]
async fn an_address_counted_by_the_layer_is_the_one_a_handler_counts() {
    for store in [Arc::new(MemoryStore::new()) as Arc<dyn LimitStore>, Arc::new(Later(MemoryStore::new()))] {
        // `ip` normalized as an address (IPv6 per /64); `client` counted as
        // the text it is given: the layer gives a client's network there
        // too, so that an exact part doesn't count each address of a /64.
        let limits = limits_on(store, &[("per-ip", "ip", 3), ("exact", "client", 3)]);
        let app = router()
            .layer(LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp).unwrap())
            .layer(LimitLayer::new(limits.clone(), "exact", "client", PeerIp).unwrap());
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

/// The limits' `ipv6_prefix` is the one setting of an IPv6 client's
/// network: the layer's addresses count by it, on either extractor, as a
/// handler's do.
#[tokio::test]
async fn the_limits_ipv6_prefix_is_the_network_the_layer_counts() {
    for (bits, same_network) in [(128, false), (64, true), (48, true)] {
        let p = Part::new("ip", Algorithm::fixed_window(1, MINUTE)).normalized(Normalize::Ip);
        let limits = Limits::builder()
            .store(Arc::new(MemoryStore::new()))
            .single_instance(true)
            .ipv6_prefix(bits)
            .limit(Limit::new("per-ip").part(p))
            .build()
            .unwrap();
        let proxy = ClientIp::trusting(["fd00::/8"]).unwrap();
        let by_peer = router().layer(LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp).unwrap());
        let by_proxy = router().layer(LimitLayer::new(limits.clone(), "per-ip", "ip", proxy).unwrap());
        assert_eq!(get_from(&by_peer, "2001:db8:1:2::1", &[]).await.status(), StatusCode::OK, "/{bits}");
        // Another address of the /64, through the proxy.
        let via = [("x-forwarded-for", "2001:db8:1:2:ffff::9")];
        let want = if same_network { StatusCode::TOO_MANY_REQUESTS } else { StatusCode::OK };
        assert_eq!(get_from(&by_proxy, "fd00::1", &via).await.status(), want, "/{bits}");
        // A handler's count of another /64 of the /48 shares the layer's
        // budget only when the network is the /48.
        let d = limits.attempt("per-ip", &[("ip", "2001:db8:1:9::5")]).await.unwrap();
        assert_eq!(d.allowed, bits > 48, "/{bits}");
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

/// `app` served on a real socket of 127.0.0.1, with the peer's address.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    addr
}

/// The status of a GET to `addr` with these header lines, sent as bytes
/// (a header value need not be text on the wire).
async fn status_of(addr: SocketAddr, lines: &[&[u8]]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = b"GET /items HTTP/1.1\r\nhost: limit-store\r\nconnection: close\r\n".to_vec();
    for line in lines {
        head.extend_from_slice(line);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    stream.write_all(&head).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    String::from_utf8_lossy(&answer[..12]).split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn bytes_that_are_not_text_in_a_forwarded_header_hide_no_client() {
    // The test's own connections come from 127.0.0.1: the trusted proxy.
    let ip = ClientIp::trusting(["127.0.0.0/8", "10.0.0.0/8"]).unwrap();
    let layer = LimitLayer::new(limits(&[("per-ip", "ip", 1)]), "per-ip", "ip", ip).unwrap();
    let addr = serve(router().layer(layer.on_missing_key(MissingKey::Pass))).await;
    // What the client wrote to the left of the address the proxy appended,
    // text or not, changes nothing: the client is counted.
    for (first, again) in [
        (&b"x-forwarded-for: \xff\xfe, 203.0.113.9"[..], &b"x-forwarded-for: 203.0.113.9"[..]),
        (b"x-forwarded-for: 203.0.113.8, \xff\xfe, 198.51.100.2", b"x-forwarded-for: 198.51.100.2"),
        (b"x-forwarded-for: \xc3(, 198.51.100.3 , 10.0.0.9", b"x-forwarded-for: 1.1.1.1, 198.51.100.3"),
        (b"x-forwarded-for: 198.51.100.4,, 10.0.0.9,", b"x-forwarded-for: 198.51.100.4"),
    ] {
        assert_eq!(status_of(addr, &[first]).await, 200, "{}", first.escape_ascii());
        assert_eq!(status_of(addr, &[again]).await, 429, "{} after {}", again.escape_ascii(), first.escape_ascii());
    }
    // The same when the bytes come on a header line of their own.
    let lines: [&[u8]; 2] = [b"x-forwarded-for: \x80\x81garbage", b"x-forwarded-for: 198.51.100.5"];
    assert_eq!(status_of(addr, &lines).await, 200);
    assert_eq!(status_of(addr, &[b"x-forwarded-for: 198.51.100.5"]).await, 429);
    // Where the client's address should be (only trusted proxies to its
    // right), an element that is not one stops the walk: the request has no
    // key (and passes, as set), rather than counting what the client wrote
    // to its left as if a proxy vouched for it.
    assert_eq!(status_of(addr, &[b"x-forwarded-for: 198.51.100.6, \xff, 10.0.0.9"]).await, 200);
    assert_eq!(status_of(addr, &[b"x-forwarded-for: 198.51.100.6, \xff, 10.0.0.9"]).await, 200, "not counted");
    assert_eq!(status_of(addr, &[b"x-forwarded-for: 198.51.100.6"]).await, 200, "198.51.100.6 was never counted");

    // `Forwarded` alike, with bytes that are not text in another parameter
    // of the client's element too.
    let ip = ClientIp::trusting(["127.0.0.0/8"]).unwrap().header(ForwardedHeader::Forwarded);
    let layer = LimitLayer::new(limits(&[("per-ip", "ip", 1)]), "per-ip", "ip", ip).unwrap();
    let addr = serve(router().layer(layer.on_missing_key(MissingKey::Pass))).await;
    for (first, again) in [
        (&b"forwarded: for=\xff\xfe, for=203.0.113.9;proto=https"[..], &b"forwarded: for=203.0.113.9"[..]),
        (b"forwarded: for=\"[2001:db8::1]\";host=\xff\xfe", b"forwarded: for=\"[2001:db8::2]:443\""),
    ] {
        assert_eq!(status_of(addr, &[first]).await, 200, "{}", first.escape_ascii());
        assert_eq!(status_of(addr, &[again]).await, 429, "{} after {}", again.escape_ascii(), first.escape_ascii());
    }
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
    let app = router().layer(LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp).unwrap());
    for _ in 0..2 {
        let r = app.clone().oneshot(Request::get("/items").body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    }
    let warned = logs.lines_of_kind(&limit_store::log::Kind::LayerNoPeerAddress.to_string());
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

/// The text of every key a store was asked to count, in order.
type Noted = Arc<std::sync::Mutex<Vec<String>>>;

/// The memory store, noting each key it counts: at once or only through
/// futures, with its integer counts or without.
struct Noting {
    memory: MemoryStore,
    at_once: bool,
    integers: bool,
    noted: Noted,
}

#[async_trait::async_trait]
impl LimitStore for Noting {
    fn shared(&self) -> bool {
        false
    }
    fn answers_at_once(&self) -> bool {
        self.at_once
    }
    fn update_now(&self, keys: &[&str], apply: &mut Apply<'_>) -> Option<Result<(), StoreError>> {
        if !self.at_once {
            return None;
        }
        self.noted.lock().unwrap().extend(keys.iter().map(|k| (*k).to_owned()));
        self.memory.update_now(keys, apply)
    }
    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.noted.lock().unwrap().extend(keys.iter().map(|k| (*k).to_owned()));
        self.memory.update(keys, apply).await
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.memory.read(keys).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.memory.sweep().await
    }
    fn integer_counts(&self) -> Option<&dyn limit_store::IntegerCounts> {
        (self.at_once && self.integers).then_some(self as &dyn limit_store::IntegerCounts)
    }
}

impl limit_store::IntegerCounts for Noting {
    fn counter(&self, prefix: &str) -> Option<Box<dyn limit_store::IntegerCounter>> {
        Some(Box::new(NotingCounter {
            prefix: prefix.to_owned(),
            inner: limit_store::IntegerCounts::counter(&self.memory, prefix)?,
            noted: self.noted.clone(),
        }))
    }
}

struct NotingCounter {
    prefix: String,
    inner: Box<dyn limit_store::IntegerCounter>,
    noted: Noted,
}

impl limit_store::IntegerCounter for NotingCounter {
    fn count(&self, rest: &str, step: limit_store::GcraStep) -> Result<limit_store::GcraCounted, StoreError> {
        self.noted.lock().unwrap().push(format!("{}{rest}", self.prefix));
        self.inner.count(rest, step)
    }
}

/// Every path to a key's text gives the same bytes: the layer's address
/// (written from the address, not parsed from text) and a handler's text
/// of it, on an `ip` part and an exact one; a value too long for a key
/// (its hashed form); each through the integer count, the store's at-once
/// update and its future.
#[tokio::test]
async fn the_layer_and_a_handler_ask_the_store_for_the_same_key_bytes() {
    let long = "k".repeat(limit_store::MAX_KEY_BYTES);
    let hashed = {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(long.as_bytes());
        format!("door:client#{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
    };
    // (part, how the layer finds it, peer, header, what a handler passes, the key)
    let cases: [(&str, bool, &str, &str, &str, &str); 7] = [
        ("ip", true, "192.0.2.7", "", " 192.0.2.7", "door:ip:192.0.2.7"),
        ("ip", true, "::ffff:198.51.100.9", "", "198.51.100.9", "door:ip:198.51.100.9"),
        ("ip", true, "2001:db8:1:2:aaaa::1", "", "2001:DB8:1:2:ffff::9", "door:ip:2001:db8:1:2::/64"),
        ("client", true, "203.0.113.200", "", "203.0.113.200", "door:client:203.0.113.200"),
        ("client", true, "::ffff:10.9.8.7", "", "10.9.8.7", "door:client:10.9.8.7"),
        ("client", true, "2001:db8:1:2:aaaa::1", "", "2001:db8:1:2::", "door:client:2001:db8:1:2::"),
        ("client", false, "192.0.2.1", &long, &long, &hashed),
    ];
    for (at_once, integers) in [(true, true), (true, false), (false, false)] {
        for &(part, by_address, peer, header_value, given, key) in &cases {
            let noted = Noted::default();
            let store = Noting { memory: MemoryStore::new(), at_once, integers, noted: noted.clone() };
            let mut p = Part::new(part, Algorithm::gcra(5, MINUTE));
            if part == "ip" {
                p = p.normalized(Normalize::Ip);
            }
            let limits = Limits::builder()
                .store(Arc::new(store))
                .single_instance(true)
                .without_presets()
                .limit(Limit::new("door").part(p))
                .build()
                .unwrap();
            let app = match by_address {
                true => router().layer(LimitLayer::new(limits.clone(), "door", part, PeerIp).unwrap()),
                false => {
                    router().layer(LimitLayer::new(limits.clone(), "door", part, HeaderKey::new("x-api-key")).unwrap())
                }
            };
            let headers: &[(&str, &str)] = if header_value.is_empty() { &[] } else { &[("x-api-key", header_value)] };
            assert_eq!(get_from(&app, peer, headers).await.status(), StatusCode::OK);
            let by_layer = std::mem::take(&mut *noted.lock().unwrap());
            assert!(limits.attempt("door", &[(part, given)]).await.unwrap().allowed);
            let by_handler = std::mem::take(&mut *noted.lock().unwrap());
            let what = format!("{part} from {peer} (at once {at_once}, integers {integers})");
            assert_eq!(by_layer, [key.to_owned()], "{what}");
            assert_eq!(by_handler, by_layer, "{what}");
        }
    }
}
