//! The front door every request passes, one tower layer around each route:
//! first who may come in (`auth.rs`: the head's rules, the token, the
//! loopback check); then, on the way out, every error answer in JSON, no
//! answer sniffed by a browser, and each request counted by route and
//! status and logged at debug level, never with a key's value.
//!
//! One layer of the service's own does all of it: each layer made with
//! axum's `from_fn` or `map_response` boxes a future of the whole stack
//! below it, on every request.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{header, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use super::metrics::Metrics;
use super::{auth, error, App};

/// Puts a [`FrontDoor`] around each route.
#[derive(Clone)]
pub(crate) struct FrontDoorLayer {
    app: App,
}

impl FrontDoorLayer {
    /// The front door of `app`'s routes.
    pub(crate) fn new(app: App) -> Self {
        FrontDoorLayer { app }
    }
}

impl<S> Layer<S> for FrontDoorLayer {
    type Service = FrontDoor<S>;

    fn layer(&self, inner: S) -> FrontDoor<S> {
        FrontDoor { inner, app: self.app.clone() }
    }
}

/// A route behind the front door.
#[derive(Clone)]
pub(crate) struct FrontDoor<S> {
    inner: S,
    app: App,
}

impl<S> Service<Request> for FrontDoor<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Answering<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let seen = Seen::of(&request, &self.app.metrics);
        let inner = match auth::refused(&self.app, &request) {
            Some(refused) => Inner::Refused { answer: Some(refused) },
            None => Inner::Route { future: self.inner.call(request) },
        };
        Answering { inner, seen: Some(seen) }
    }
}

pin_project! {
    /// A request's answer: the route's, or the front door's refusal; then
    /// seen on its way out ([`Seen::answered`]).
    pub(crate) struct Answering<F> {
        #[pin]
        inner: Inner<F>,
        seen: Option<Seen>,
    }
}

pin_project! {
    /// Where the answer comes from.
    #[project = InnerProj]
    enum Inner<F> {
        Refused { answer: Option<Response> },
        Route { #[pin] future: F },
    }
}

impl<F: Future<Output = Result<Response, Infallible>>> Future for Answering<F> {
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = match this.inner.project() {
            InnerProj::Refused { answer } => answer.take().expect("an answer is polled once it is ready"),
            InnerProj::Route { future } => {
                let Ok(response) = ready!(future.poll(cx));
                response
            }
        };
        let seen = this.seen.take().expect("an answer is polled once it is ready");
        Poll::Ready(Ok(seen.answered(response)))
    }
}

/// What the way out needs of a request: what to count it by and to log.
struct Seen {
    started: Instant,
    metrics: Arc<Metrics>,
    route: Option<MatchedPath>,
    /// The method and target, for the debug line; only when it is written.
    logged: Option<(Method, Uri)>,
}

impl Seen {
    fn of(request: &Request, metrics: &Arc<Metrics>) -> Self {
        Seen {
            started: Instant::now(),
            metrics: metrics.clone(),
            route: request.extensions().get::<MatchedPath>().cloned(),
            logged: tracing::enabled!(tracing::Level::DEBUG).then(|| (request.method().clone(), request.uri().clone())),
        }
    }

    /// `response` on its way out: an error in JSON, never sniffed; counted
    /// by route and status, and logged.
    fn answered(self, response: Response) -> Response {
        let mut response = json_errors(response);
        response.headers_mut().insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
        let route = self.route.as_ref().map_or("unmatched", MatchedPath::as_str);
        let status = response.status().as_u16();
        self.metrics.answered(route, status);
        if let Some((method, uri)) = self.logged {
            tracing::debug!(
                kind = limit_store::log::Kind::Request.as_str(),
                %method,
                path = uri.path(),
                status,
                micros = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX),
                "request"
            );
        }
        response
    }
}

/// Every error answer in JSON: one that something other than a route wrote
/// (an extractor's rejection, say) as text becomes the error of its status.
fn json_errors(response: Response) -> Response {
    let status = response.status();
    let json =
        response.headers().get(header::CONTENT_TYPE).is_some_and(|t| t.as_bytes().starts_with(b"application/json"));
    if json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    error::ApiError::for_status(status).into_response()
}
