//! One client's socket as hyper sees it, with what hyper does not do itself:
//! - **the head's deadline**: while no request is being answered, the next
//!   request head must arrive within the request timeout. Then an idle
//!   connection is closed, and one that sent part of a head is answered 408
//!   first;
//! - **JSON for a head that does not parse**: hyper answers a head it can't
//!   parse (400, 414, 431) with no body, before any request reaches the
//!   router; that answer is written as the JSON error of every other 4xx.
//!   An HTTP/2 client's preface, which hyper closes on without a word, gets
//!   a 400 in JSON too;
//! - **a stalled write**: a client that reads nothing (requests sent, answers
//!   never read) for the request timeout ends its connection.
//!
//! Whether a request is being answered is the connection's [`Turn`], which
//! the exchange sets when it takes a request and when its answer ends; the
//! socket sets it back to waiting once hyper has flushed that answer, so
//! every byte hyper writes while the socket waits is its own answer to a
//! head.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::error::ApiError;

const WAITING: u8 = 0;
const ANSWERING: u8 = 1;
const ANSWERED: u8 = 2;

/// Where one connection is: waiting for a request head, answering a request,
/// or done answering (its last bytes not yet flushed).
#[derive(Debug, Default)]
pub(super) struct Turn(AtomicU8);

impl Turn {
    /// A request head arrived and goes to the router.
    pub(super) fn answering(&self) {
        self.0.store(ANSWERING, Ordering::Release);
    }

    /// The answer's body ended (or was dropped): hyper has all of it.
    pub(super) fn answered(&self) {
        let _ = self.0.compare_exchange(ANSWERING, ANSWERED, Ordering::AcqRel, Ordering::Acquire);
    }

    fn waiting(&self) -> bool {
        self.0.load(Ordering::Acquire) == WAITING
    }

    /// Back to waiting, if the answer ended; true if it did.
    fn flushed(&self) -> bool {
        self.0.compare_exchange(ANSWERED, WAITING, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// A client's socket, with the deadlines and answers above.
pub(super) struct Socket {
    stream: TcpStream,
    turn: Arc<Turn>,
    timeout: Duration,
    /// The deadline of the head awaited (while the turn is waiting).
    head_by: Instant,
    /// A timer at or before `head_by`: moved on only when it fires early, so
    /// a request costs the timer nothing.
    head: Pin<Box<Sleep>>,
    /// Part of that head has arrived.
    head_started: bool,
    /// Since when a write has waited for the client to read.
    stall: Option<Pin<Box<Sleep>>>,
    /// An answer of our own, written in place of anything hyper writes; the
    /// connection ends after it.
    ours: Option<Ours>,
}

struct Ours {
    bytes: Vec<u8>,
    written: usize,
}

impl Socket {
    /// `stream`, waiting for its first request head.
    pub(super) fn new(stream: TcpStream, turn: Arc<Turn>, timeout: Duration) -> Self {
        let head_by = Instant::now() + timeout;
        Socket {
            stream,
            turn,
            timeout,
            head_by,
            head: Box::pin(tokio::time::sleep_until(head_by)),
            head_started: false,
            stall: None,
            ours: None,
        }
    }

    /// Writes our answer on, as far as the client takes it now.
    fn write_ours(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(ours) = &mut self.ours else { return Poll::Ready(Ok(())) };
        while ours.written < ours.bytes.len() {
            let written = Pin::new(&mut self.stream).poll_write(cx, &ours.bytes[ours.written..]);
            match stalled(&mut self.stall, self.timeout, cx, written) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => ours.written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// True once the head's deadline has passed; otherwise the timer wakes
    /// this task at it.
    fn head_is_late(&mut self, cx: &mut Context<'_>) -> bool {
        while self.head.as_mut().poll(cx).is_ready() {
            // The timer counts whole milliseconds: within one of the deadline is at it.
            if Instant::now() + Duration::from_millis(1) >= self.head_by {
                return true;
            }
            let by = self.head_by;
            self.head.as_mut().reset(by);
        }
        false
    }

    fn answer(&mut self, cx: &mut Context<'_>, error: ApiError) {
        self.ours = Some(Ours { bytes: error.to_bytes(), written: 0 });
        // As much as the socket takes now; the rest when hyper flushes.
        let _ = self.write_ours(cx);
    }
}

impl AsyncRead for Socket {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.ours.is_some() {
            // Answered: no more requests on this connection.
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(read) => {
                if this.turn.waiting() && buf.filled().len() > before {
                    if !this.head_started && buf.filled()[before..].starts_with(HTTP2_PREFACE) {
                        // hyper would close without a word: ours goes out, and hyper reads the end.
                        buf.set_filled(before);
                        this.answer(cx, http2_refused());
                        return Poll::Ready(Ok(()));
                    }
                    this.head_started = true;
                }
                Poll::Ready(read)
            }
            Poll::Pending if this.turn.waiting() && this.head_is_late(cx) => {
                if this.head_started {
                    this.answer(cx, timed_out("a request head"));
                }
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no request head within the timeout")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.ours.is_none() && this.turn.waiting() {
            if let Some(status) = status_of_unparsed_head(buf) {
                this.answer(cx, ApiError::for_status(status));
            }
        }
        if this.ours.is_some() {
            // hyper's bytes go nowhere: ours are written instead.
            return match this.write_ours(cx) {
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                _ => Poll::Ready(Ok(buf.len())),
            };
        }
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        stalled(&mut this.stall, this.timeout, cx, written)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.write_ours(cx))?;
        std::task::ready!(Pin::new(&mut this.stream).poll_flush(cx))?;
        if this.turn.flushed() {
            // The answer is out: the next head's deadline starts now. hyper
            // reads again only when woken, so the timer wakes it then.
            this.head_by = Instant::now() + this.timeout;
            this.head_started = false;
            let _ = this.head_is_late(cx);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.write_ours(cx))?;
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

/// `written`, or an error once writes have waited `timeout` for the client.
fn stalled<T>(
    stall: &mut Option<Pin<Box<Sleep>>>,
    timeout: Duration,
    cx: &mut Context<'_>,
    written: Poll<io::Result<T>>,
) -> Poll<io::Result<T>> {
    if written.is_ready() {
        *stall = None;
        return written;
    }
    let since = stall.get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
    if since.as_mut().poll(cx).is_ready() {
        return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client read nothing within the timeout")));
    }
    Poll::Pending
}

/// The status of hyper's own answer to a head it could not parse: a 4xx
/// status line, written while no request was being answered.
fn status_of_unparsed_head(buf: &[u8]) -> Option<StatusCode> {
    let code = buf.strip_prefix(b"HTTP/1.1 ")?.get(..3)?;
    let status = StatusCode::from_bytes(code).ok()?;
    status.is_client_error().then_some(status)
}

/// How an HTTP/2 client with prior knowledge opens a connection.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// The answer to an HTTP/2 client: in HTTP/1.1, which some HTTP/2 clients
/// recognise and say so.
fn http2_refused() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "bad-request",
        "this port speaks HTTP/1.1, not HTTP/2: send HTTP/1.1 (Envoy's rate limit service, over gRPC, is on \
         serve --grpc-listen)",
    )
}

/// The 408 of a request part that did not arrive in time.
pub(super) fn timed_out(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "request-timeout",
        format!("{what} did not arrive within the request timeout: send the whole request at once"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_4xx_status_line_is_taken_for_an_unparsed_head() {
        assert_eq!(status_of_unparsed_head(b"HTTP/1.1 400 Bad Request\r\n"), Some(StatusCode::BAD_REQUEST));
        assert_eq!(status_of_unparsed_head(b"HTTP/1.1 431 "), Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE));
        assert_eq!(status_of_unparsed_head(b"HTTP/1.1 200 OK\r\n"), None);
        assert_eq!(status_of_unparsed_head(b"HTTP/1.1 4"), None);
        assert_eq!(status_of_unparsed_head(b"{\"error\": 1}"), None);
    }

    #[test]
    fn a_turn_waits_again_only_after_its_answer_ended() {
        let turn = Turn::default();
        assert!(turn.waiting());
        turn.answering();
        assert!(!turn.flushed(), "a flush in the middle of an answer");
        turn.answered();
        assert!(!turn.waiting());
        assert!(turn.flushed());
        assert!(turn.waiting());
        turn.answered();
        assert!(turn.waiting(), "a late end changes nothing");
    }
}
