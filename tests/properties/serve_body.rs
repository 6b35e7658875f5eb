//! The serve API's request bodies, through the real router: whatever the body
//! and its content type, the answer is one the API documents (never a 500, and
//! never a 503 from a memory store that has room), errors are JSON with a
//! `kind`, and only a JSON object of string keys is ever counted.

#![allow(dead_code)] // each user takes what it needs

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::Router;
use limit_store::clock::ManualClock;
use limit_store::{Guarded, LimitStore, Limits, MemoryStore};

use crate::serve::router;
use serde_json::Value;
use tower::ServiceExt;

/// The largest body the service takes, as its guide says (`a body over 16 KiB 413`).
const MAX_BODY: usize = 16 * 1024;

/// The limits a body is sent to: every preset and one that does not exist.
pub const LIMITS: [&str; 6] = ["sign-in", "password-reset", "code-sent", "code-verify", "api", "no-such-limit"];
/// The content types a body is sent with.
pub const CONTENT_TYPES: [Option<&str>; 4] =
    [Some("application/json"), Some("Application/JSON; charset=utf-8"), Some("text/plain"), None];

/// One request.
#[derive(Clone, Debug)]
pub struct Input<'a> {
    /// Attempt, or reset.
    pub attempt: bool,
    /// An index into [`LIMITS`].
    pub limit: usize,
    /// An index into [`CONTENT_TYPES`].
    pub content_type: usize,
    /// The body.
    pub body: &'a [u8],
}

impl<'a> Input<'a> {
    /// The fuzzer's bytes: one byte choosing route, limit and content type, then the body.
    pub fn from_bytes(data: &'a [u8]) -> Option<Self> {
        let (&choice, body) = data.split_first()?;
        let choice = usize::from(choice);
        Some(Input { attempt: choice & 1 == 0, limit: (choice >> 1) % 6, content_type: (choice >> 4) % 4, body })
    }
}

/// The service over a memory store whose clock moves a day per request, so a
/// long run never fills it.
pub struct Service {
    runtime: tokio::runtime::Runtime,
    router: Router,
    store: Arc<MemoryStore>,
    clock: ManualClock,
    requests: u64,
}

impl Service {
    /// The router over the presets.
    pub fn new() -> Self {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let clock = ManualClock::new(1_700_000_000_000);
        let store = Arc::new(MemoryStore::with_clock(1_000_000, Arc::new(clock.clone())));
        let guarded = Arc::new(Guarded::new(store.clone() as Arc<dyn LimitStore>));
        let router = runtime.block_on(async { router(guarded, Limits::builder(), None) }).expect("the presets build");
        Service { runtime, router, store, clock, requests: 0 }
    }

    /// Sends `input` and checks the answer.
    pub fn check(&mut self, input: &Input<'_>) {
        self.requests += 1;
        self.clock.advance(Duration::from_secs(86_400));
        if self.requests.is_multiple_of(10_000) {
            self.runtime.block_on(LimitStore::sweep(&*self.store)).expect("swept");
        }
        let route = if input.attempt { "attempt" } else { "reset" };
        let mut request =
            Request::builder().method("POST").uri(format!("/v1/limits/{}/{route}", LIMITS[input.limit % LIMITS.len()]));
        if let Some(content_type) = CONTENT_TYPES[input.content_type % CONTENT_TYPES.len()] {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let request = request.body(Body::from(input.body.to_vec())).expect("a request");
        let (status, body) = self.runtime.block_on(async {
            let response = self.router.clone().oneshot(request).await.expect("the router answers");
            let status = response.status();
            (status, axum::body::to_bytes(response.into_body(), usize::MAX).await.expect("a body"))
        });
        let expected: &[StatusCode] =
            if input.attempt { &[StatusCode::OK, StatusCode::TOO_MANY_REQUESTS] } else { &[StatusCode::NO_CONTENT] };
        let errors = [
            StatusCode::BAD_REQUEST,
            StatusCode::NOT_FOUND,
            StatusCode::PAYLOAD_TOO_LARGE,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            StatusCode::UNPROCESSABLE_ENTITY,
        ];
        let text = String::from_utf8_lossy(&body);
        assert!(expected.contains(&status) || errors.contains(&status), "{input:?}: {status} {text}");
        if errors.contains(&status) {
            let json: Value =
                serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{input:?}: {status} {text}: {e}"));
            assert!(json["kind"].is_string() && json["error"].is_string(), "{input:?}: {status} {text}");
            return;
        }
        // Counted: so the body was a JSON object of string keys, within the size.
        assert!(input.body.len() <= MAX_BODY, "{input:?}: {status}");
        let sent: Value = serde_json::from_slice(input.body).unwrap_or_else(|e| panic!("{input:?}: {status}, {e}"));
        let keys = sent.as_object().and_then(|o| o.get("keys")).and_then(Value::as_object);
        assert!(keys.is_some_and(|k| k.values().all(Value::is_string)), "{input:?}: {status}");
        if input.attempt {
            let json: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{input:?}: {text}: {e}"));
            assert_eq!(json["allowed"].as_bool(), Some(status == StatusCode::OK), "{input:?}: {text}");
        }
    }
}

impl Default for Service {
    fn default() -> Self {
        Service::new()
    }
}
