//! The gRPC server of the Envoy service: `ShouldRateLimit` routed to
//! [`EnvoyService`] over tonic. A call's token is checked on its headers
//! before its message is read; the message is read up to [`MAX_REQUEST`]
//! bytes (past it, RESOURCE_EXHAUSTED), uncompressed, and anything that is
//! not a `RateLimitRequest` is INVALID_ARGUMENT; a call not answered within the request timeout is
//! DEADLINE_EXCEEDED. At shutdown the calls in flight have the shutdown
//! grace to finish.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::Status;

use super::incoming::accept;
use super::service::EnvoyService;
use crate::serve::listener::Accepting;
use limit_store::config::ServeSettings;
use limit_store::log::Kind;

/// The largest request taken, in bytes: far above any descriptor list envoy sends.
pub(crate) const MAX_REQUEST: usize = 64 * 1024;
/// The streams one connection may have open at once: HTTP/2's recommended
/// least, far above the calls envoy keeps in flight on one connection (it
/// opens another past it).
const MAX_STREAMS: u32 = 100;
/// The streams a client may open and reset before they are served (rapid
/// reset); past it, GOAWAY.
const MAX_PENDING_RESETS: usize = 64;
/// The streams a client may make the server reset by its protocol errors,
/// over a connection's life; past it, GOAWAY.
const MAX_LOCAL_RESETS: usize = 1024;
/// The one method answered.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Serves `service` on `listener` until `shutdown` resolves; then the calls
/// in flight have `settings.shutdown_grace` to finish. Connections take
/// their places from `places`, which the HTTP port shares.
pub(crate) async fn run_envoy(
    listener: TcpListener,
    service: EnvoyService,
    settings: &ServeSettings,
    places: Arc<Semaphore>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let timeout = settings.request_timeout;
    let accepting = Accepting::new(places, settings.max_connections, "gRPC");
    let server = EnvoyServer { service: Arc::new(service), timeout };
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = stopping.send(());
    };
    // A connection that sends nothing for the request timeout is pinged,
    // and closed if the ping is not answered within it again.
    let serving = tonic::transport::Server::builder()
        .max_concurrent_streams(MAX_STREAMS)
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_RESETS))
        // h2's own bound on the streams a client makes the server reset
        // (CVE-2025-8671), which tonic turns off unless it is given.
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_RESETS))
        .http2_keepalive_interval(Some(timeout))
        .http2_keepalive_timeout(Some(timeout))
        .add_service(server)
        .serve_with_incoming_shutdown(accept(listener, accepting, timeout), signal);
    let mut serving = pin!(serving);
    tokio::select! {
        served = &mut serving => return served,
        _ = stopped => {}
    }
    match tokio::time::timeout(settings.shutdown_grace, serving).await {
        Ok(served) => served,
        Err(_) => {
            tracing::warn!(
                kind = Kind::DrainCut.as_str(),
                port = "gRPC",
                "the shutdown grace ran out: the gRPC calls still open are closed (serve.shutdown_grace)"
            );
            Ok(())
        }
    }
}

/// `RateLimitService` over HTTP/2, for tonic's router.
#[derive(Clone)]
struct EnvoyServer {
    service: Arc<EnvoyService>,
    timeout: Duration,
}

impl NamedService for EnvoyServer {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl tonic::codegen::Service<http::Request<Body>> for EnvoyServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let (service, timeout) = (self.service.clone(), self.timeout);
        Box::pin(async move {
            if request.uri().path() != SHOULD_RATE_LIMIT {
                return Ok(Status::unimplemented(format!("this service answers {SHOULD_RATE_LIMIT} only")).into_http());
            }
            if let Err(refused) = service.authorized(request.headers()) {
                return Ok(refused.into_http());
            }
            let mut grpc = Grpc::new(RequestCodec).apply_max_message_size_config(Some(MAX_REQUEST), None);
            match tokio::time::timeout(timeout, grpc.unary(Call(service), request)).await {
                Ok(answer) => Ok(too_large_is_exhausted(answer)),
                Err(_) => Ok(Status::deadline_exceeded(
                    "the call was not answered within the request timeout (serve.request_timeout): send the \
                     whole message at once",
                )
                .into_http()),
            }
        })
    }
}

/// A message over [`MAX_REQUEST`] is RESOURCE_EXHAUSTED, as gRPC's status
/// codes name it; tonic says OUT_OF_RANGE, a code the service itself never
/// gives, so every OUT_OF_RANGE is tonic's size check.
fn too_large_is_exhausted(answer: http::Response<Body>) -> http::Response<Body> {
    if answer.headers().get("grpc-status").is_some_and(|code| code == "11") {
        return Status::resource_exhausted(format!(
            "the message is over {MAX_REQUEST} bytes, the most this service reads: send fewer descriptors in a call"
        ))
        .into_http();
    }
    answer
}

/// One call's request, answered by the service.
struct Call(Arc<EnvoyService>);

impl UnaryService<RateLimitRequest> for Call {
    type Response = RateLimitResponse;
    type Future = Pin<Box<dyn Future<Output = Result<tonic::Response<RateLimitResponse>, Status>> + Send>>;

    fn call(&mut self, request: tonic::Request<RateLimitRequest>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.should_rate_limit(request.get_ref()).await.map(tonic::Response::new) })
    }
}

/// Protobuf both ways; a message that does not decode is the caller's
/// fault (INVALID_ARGUMENT), not the server's.
struct RequestCodec;

impl Codec for RequestCodec {
    type Encode = RateLimitResponse;
    type Decode = RateLimitRequest;
    type Encoder = RequestCodec;
    type Decoder = RequestCodec;

    fn encoder(&mut self) -> RequestCodec {
        RequestCodec
    }

    fn decoder(&mut self) -> RequestCodec {
        RequestCodec
    }
}

impl Encoder for RequestCodec {
    type Item = RateLimitResponse;
    type Error = Status;

    fn encode(&mut self, item: RateLimitResponse, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(buf).map_err(|e| Status::internal(format!("the answer could not be encoded: {e}")))
    }
}

impl Decoder for RequestCodec {
    type Item = RateLimitRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RateLimitRequest>, Status> {
        RateLimitRequest::decode(buf).map(Some).map_err(|e| {
            Status::invalid_argument(format!(
                "the message is not an envoy.service.ratelimit.v3.RateLimitRequest ({e}): send one, as envoy's \
                 rate limit filter does"
            ))
        })
    }
}
