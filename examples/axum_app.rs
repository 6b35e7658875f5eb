//! A small axum app limited by limit-store:
//!
//! - `POST /sign-in` `{"account", "password"}`: per account and per IP, with
//!   lockout; the right password clears the account's failures;
//! - `POST /password-reset` `{"account"}` and `POST /send-code` `{"phone"}`
//!   (each text costs money: SMS pumping);
//! - `/api/*` behind the layer, keyed by the `X-Api-Key` header.
//!
//! ```sh
//! cargo run --example axum_app --features axum
//! # on a database, shared by every instance of the app:
//! LIMIT_STORE_DATABASE_URL=sqlite://app.db LIMIT_STORE_SECRET=$(openssl rand -hex 32) \
//!     cargo run --example axum_app --features axum
//! curl -si localhost:3000/sign-in -H 'content-type: application/json' \
//!     -d '{"account": "ada@example.com", "password": "wrong"}'
//! ```

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use limit_store::layer::{attempt, HeaderKey, LimitLayer, MissingKey, Refusal};
use limit_store::{LimitError, LimitStore, Limits, MemoryStore};
use serde::Deserialize;

/// The one account of the demo. A real app checks a password hash.
const ACCOUNT: (&str, &str) = ("ada@example.com", "correct horse battery staple");

/// The routes, on `limits` (presets `sign-in`, `password-reset`, `code-sent`, `api`).
pub fn app(limits: Limits) -> Result<Router, LimitError> {
    // Keyed by API key; behind a proxy, key per-IP limits by
    // `ClientIp::trusting(["10.0.0.0/8"])` instead of the peer.
    let per_key = LimitLayer::new(limits.clone(), "api", "client", HeaderKey::new("x-api-key"))?
        .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED))
        .key_name("X-Api-Key header");
    let api = Router::new().route("/items", get(|| async { Json(["apple", "pear"]) })).layer(per_key);
    Ok(Router::new()
        .route("/sign-in", post(sign_in))
        .route("/password-reset", post(password_reset))
        .route("/send-code", post(send_code))
        .nest("/api", api)
        .with_state(limits))
}

#[derive(Deserialize)]
struct SignIn {
    account: String,
    password: String,
}

async fn sign_in(
    State(limits): State<Limits>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(form): Json<SignIn>,
) -> Result<Response, Refusal> {
    let ip = peer.ip().to_string();
    // Counted before the password is checked: 429 once the account is locked.
    let admitted = attempt(&limits, "sign-in", &[("account", &form.account), ("ip", &ip)]).await?;
    if !form.account.trim().eq_ignore_ascii_case(ACCOUNT.0) || form.password != ACCOUNT.1 {
        return Ok(admitted.respond((StatusCode::UNAUTHORIZED, "wrong account or password")));
    }
    // The right password clears the account's failures (the IP's keep counting).
    if let Err(e) = limits.reset("sign-in", &[("account", &form.account)]).await {
        tracing::warn!(kind = "sign-in-reset-failed", error = %e, "could not clear the account's failures");
    }
    Ok(admitted.respond("signed in"))
}

#[derive(Deserialize)]
struct Account {
    account: String,
}

async fn password_reset(
    State(limits): State<Limits>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(form): Json<Account>,
) -> Result<Response, Refusal> {
    let ip = peer.ip().to_string();
    let admitted = attempt(&limits, "password-reset", &[("account", &form.account), ("ip", &ip)]).await?;
    // Send the email here; say the same whether the account exists or not.
    Ok(admitted.respond((StatusCode::ACCEPTED, "if the account exists, a reset link is on its way")))
}

#[derive(Deserialize)]
struct Phone {
    phone: String,
}

async fn send_code(State(limits): State<Limits>, Json(form): Json<Phone>) -> Result<Response, Refusal> {
    let admitted = attempt(&limits, "code-sent", &[("destination", &form.phone)]).await?;
    // Send the text here.
    Ok(admitted.respond((StatusCode::ACCEPTED, "code sent")))
}

/// The store: memory by default; the database at `LIMIT_STORE_DATABASE_URL`
/// (with `LIMIT_STORE_SECRET`) when it is set.
pub async fn store_from_env() -> Result<Arc<dyn LimitStore>, Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("LIMIT_STORE_DATABASE_URL") else {
        return Ok(Arc::new(MemoryStore::new()));
    };
    let secret = std::env::var("LIMIT_STORE_SECRET")
        .map_err(|_| "set LIMIT_STORE_SECRET (at least 32 bytes) with LIMIT_STORE_DATABASE_URL")?;
    limit_store::DatabaseStore::builder(&url).migrate().await?;
    Ok(Arc::new(limit_store::DatabaseStore::builder(&url).secret(&secret).connect().await?))
}

#[tokio::main]
#[allow(dead_code)] // the tests reach the app without its `main`
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt().with_env_filter("info").init();
    let store = store_from_env().await?;
    let single = !store.shared();
    let limits = Limits::builder().store(store).single_instance(single).build()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(limits)?.into_make_service_with_connect_info::<SocketAddr>()).await?;
    Ok(())
}
