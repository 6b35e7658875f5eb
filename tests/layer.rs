//! The tower layer in a real axum router, driven with `oneshot`: allowed
//! then limited with its fields, the policy under an unavailable store, the
//! client's address behind trusted and untrusted proxies, a missing key, and
//! stacked layers.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use limit_store::error::Unavailable;
use limit_store::layer::{ClientIp, ForwardedHeader, HeaderKey, LimitLayer, MissingKey, PeerIp, RefusalBody};
use limit_store::limits::{Algorithm, Normalize, Part};
use limit_store::{Apply, Entry, Limit, LimitStore, Limits, MemoryStore, Policy, StoreError};
use tower::ServiceExt;

const MINUTE: Duration = Duration::from_secs(60);

/// Limits with one limit of its own, `name`, counting `part` by a fixed
/// window of `budget` a minute, on `store`.
fn limits_on(store: Arc<dyn LimitStore>, defined: &[(&str, &str, u64)]) -> Limits {
    let mut builder = Limits::builder().store(store).single_instance(true);
    for &(name, part, budget) in defined {
        let mut p = Part::new(part, Algorithm::fixed_window(budget, MINUTE));
        if part == "ip" {
            p = p.normalized(Normalize::Ip);
        }
        builder = builder.limit(Limit::new(name).part(p));
    }
    builder.build().unwrap()
}

fn limits(defined: &[(&str, &str, u64)]) -> Limits {
    limits_on(Arc::new(MemoryStore::new()), defined)
}

fn router() -> Router {
    Router::new().route("/items", get(|| async { "items" }))
}

/// One GET from `peer` with `headers`.
async fn get_from(app: &Router, peer: &str, headers: &[(&str, &str)]) -> Response {
    let mut request = Request::get("/items");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    let peer: SocketAddr = format!("{peer}:40000").parse().or_else(|_| format!("[{peer}]:40000").parse()).unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    app.clone().oneshot(request).await.unwrap()
}

async fn body(response: Response) -> serde_json::Value {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()))
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

/// Every value of `name`, in order.
fn all(response: &Response, name: &str) -> Vec<String> {
    response.headers().get_all(name).iter().map(|v| v.to_str().unwrap().to_owned()).collect()
}

/// `(name, first, second)` of a RateLimit or RateLimit-Policy item.
fn field(value: &str, first: &str, second: &str) -> (String, i64, i64) {
    let list = sfv::Parser::parse_list(value.as_bytes()).unwrap_or_else(|e| panic!("{value:?}: {e}"));
    let sfv::ListEntry::Item(item) = &list[0] else { panic!("{value:?}: not an item") };
    let sfv::BareItem::String(name) = &item.bare_item else { panic!("{value:?}: no name") };
    let int = |key: &str| match item.params.get(key) {
        Some(sfv::BareItem::Integer(i)) => *i,
        other => panic!("{value:?}: {key} is {other:?}"),
    };
    (name.clone(), int(first), int(second))
}

#[tokio::test]
async fn allowed_then_limited_with_retry_after_and_fields() {
    allowed_then_limited(Arc::new(MemoryStore::new())).await;
}

/// The memory store answering only through futures, as a database does: the
/// layer's other path.
struct Later(MemoryStore);

#[async_trait::async_trait]
impl LimitStore for Later {
    fn shared(&self) -> bool {
        false
    }
    async fn update(&self, keys: &[&str], apply: &mut Apply<'_>) -> Result<(), StoreError> {
        self.0.update(keys, apply).await
    }
    async fn read(&self, keys: &[&str]) -> Result<Vec<Option<Entry>>, StoreError> {
        self.0.read(keys).await
    }
    async fn sweep(&self) -> Result<u64, StoreError> {
        self.0.sweep().await
    }
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
async fn stacked_layers_each_count_and_each_add_their_fields() {
    let limits = limits(&[("keyed", "client", 3), ("per-ip", "ip", 2)]);
    let app = router()
        .layer(LimitLayer::new(limits.clone(), "keyed", "client", HeaderKey::new("x-api-key")).unwrap())
        .layer(LimitLayer::new(limits, "per-ip", "ip", PeerIp::new()).unwrap());
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
    let layer = LimitLayer::new(limits.clone(), "per-ip", "ip", PeerIp::new()).unwrap();
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
