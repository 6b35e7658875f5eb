//! The tower layer in a real axum router, driven with `oneshot`: allowed
//! then limited with its fields, the policy under an unavailable store, the
//! client's address behind trusted and untrusted proxies, a missing key, and
//! stacked layers. Here the helpers both halves share: `answers.rs`, what
//! the layer answers; `keys.rs`, what it counts by. `app.rs` serves the
//! example app on a real socket.

mod answers;
#[cfg(feature = "sqlite")]
mod app;
#[path = "../common/mod.rs"]
mod common;
mod keys;

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
