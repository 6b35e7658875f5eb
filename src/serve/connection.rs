//! One client connection: hyper's HTTP/1.1 over the [`Socket`], each request
//! handed to the router with a body that must arrive within the request
//! timeout (counted from its head): one that does not is answered 408, and
//! the connection closed.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderValue, Request, Response};
use axum::response::IntoResponse;
use axum::Router;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::socket::{timed_out, Socket, Turn};

/// The most a connection buffers of what it reads, so the most a request
/// head may take: past it, 431. hyper's own is about 400 KiB, which at
/// 10,000 connections is 4 GB of buffers held by heads that never end.
pub(crate) const MAX_HEAD: usize = 16 * 1024;

/// hyper's connection over `stream`, answering with `router`.
pub(super) fn connection(
    stream: TcpStream,
    router: Router,
    timeout: Duration,
) -> http1::Connection<TokioIo<Socket>, Exchange> {
    let turn = Arc::new(Turn::default());
    let socket = Socket::new(stream, turn.clone(), timeout);
    http1::Builder::new()
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(socket), Exchange { router, turn, timeout })
}

/// Takes each request of one connection to the router.
pub(super) struct Exchange {
    router: Router,
    turn: Arc<Turn>,
    timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for Exchange {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        self.turn.answering();
        let late = Arc::new(AtomicBool::new(false));
        let request = request.map(|body| TimedBody::new(body, self.timeout, late.clone()));
        let mut router = self.router.clone();
        let turn = self.turn.clone();
        Box::pin(async move {
            let Ok(mut response) = tower_service::Service::call(&mut router, request).await;
            if late.load(Ordering::Relaxed) {
                response = timed_out("the request's body").into_response();
                let headers = response.headers_mut();
                headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
                headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
            }
            Ok(response.map(|body| Answer { body, turn }))
        })
    }
}

/// A request's body, which ends in an error (and marks the request `late`)
/// if it is not all there within the timeout.
struct TimedBody {
    body: Incoming,
    deadline: Option<Pin<Box<Sleep>>>,
    late: Arc<AtomicBool>,
}

impl TimedBody {
    fn new(body: Incoming, timeout: Duration, late: Arc<AtomicBool>) -> Self {
        let deadline = (!body.is_end_stream()).then(|| Box::pin(tokio::time::sleep(timeout)));
        TimedBody { body, deadline, late }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let Some(deadline) = &mut this.deadline else { return Poll::Pending };
        if deadline.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        this.deadline = None;
        this.late.store(true, Ordering::Relaxed);
        Poll::Ready(Some(Err("the request's body did not arrive within the request timeout".into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// An answer's body, which tells the connection's turn when it has ended.
pub(super) struct Answer {
    body: axum::body::Body,
    turn: Arc<Turn>,
}

impl Body for Answer {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = frame {
            self.turn.answered();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        self.turn.answered();
    }
}
