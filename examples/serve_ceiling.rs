//! The HTTP ceiling for `bench/serve.sh`: a bare axum handler that answers
//! the attempt route with the same JSON body and headers as `serve`, and
//! counts nothing. `cargo run --release --example serve_ceiling -- ADDR`.

use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::{Json, Router};

async fn attempt(_body: axum::body::Bytes) -> impl IntoResponse {
    let body = serde_json::json!({"allowed": true, "remaining": 599, "reset_at": 1_800_000_000_000_i64, "budget": 600, "part": "client"});
    let mut response = Json(body).into_response();
    let headers = response.headers_mut();
    headers.insert("ratelimit-policy", HeaderValue::from_static("\"api\";q=600;w=60"));
    headers.insert("ratelimit", HeaderValue::from_static("\"api\";r=599;t=1"));
    response
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8090".into());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    let app = Router::new().route("/v1/limits/{name}/attempt", post(attempt));
    axum::serve(listener, app).await
}
