//! The gRPC port's connections: each takes a place of the ones `serve`
//! shares between its two ports (`serve.max_connections`; past it, new ones
//! wait until one closes), and a client must send HTTP/2's preface within
//! the request timeout or lose its connection. Once it has, the server's
//! keep-alive pings close a connection that stops answering.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::time::Sleep;
use tonic::codegen::tokio_stream::Stream;
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::serve::listener::Accepting;

/// What every HTTP/2 connection opens with.
const PREFACE_BYTES: usize = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".len();

/// The connections accepted on a listener, for tonic.
pub(super) struct Accepted(mpsc::Receiver<Connection>);

impl Stream for Accepted {
    type Item = std::io::Result<Connection>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Accepts on `listener`, each connection holding the place `accepting`
/// gave it until it closes. Stops, and closes the listener, when the stream
/// is dropped.
pub(super) fn accept(listener: TcpListener, mut accepting: Accepting, timeout: Duration) -> Accepted {
    let (sender, receiver) = mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            let (stream, place) = tokio::select! {
                next = accepting.next(&listener) => next,
                () = sender.closed() => break,
            };
            if sender.send(Connection::new(stream, place, timeout)).await.is_err() {
                break;
            }
        }
    });
    Accepted(receiver)
}

/// One client connection: its socket, its place, and until the client's
/// preface has come, when it must have.
pub(super) struct Connection {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
    preface: Option<(usize, Pin<Box<Sleep>>)>,
}

impl Connection {
    fn new(stream: TcpStream, place: OwnedSemaphorePermit, timeout: Duration) -> Self {
        Connection { stream, _place: place, preface: Some((PREFACE_BYTES, Box::pin(tokio::time::sleep(timeout)))) }
    }
}

impl AsyncRead for Connection {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let read = Pin::new(&mut this.stream).poll_read(cx, buf);
        let Some((left, deadline)) = &mut this.preface else { return read };
        match read {
            Poll::Ready(Ok(())) => {
                *left = left.saturating_sub(buf.filled().len() - before);
                if *left == 0 {
                    this.preface = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the HTTP/2 preface did not arrive within the request timeout",
            ))),
            other => other,
        }
    }
}

impl AsyncWrite for Connection {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl Connected for Connection {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.stream.connect_info()
    }
}
