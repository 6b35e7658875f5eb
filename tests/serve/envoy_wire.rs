//! gRPC as it goes over the wire, for the attacks on `serve --grpc-listen`
//! (`envoy_attacks.rs`, `envoy_messages.rs`): HTTP/2 by the `h2` crate, or
//! raw frames by hand, so a test can send what no well-behaved client
//! would; and `serve` started to take them.

use std::time::Duration;

use bytes::Bytes;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpStream;

use crate::common::db::rand_suffix;
use crate::common::serve::{free_port, settings_file, Serve, Start};

pub const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// What every HTTP/2 connection opens with.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/envoy/rules.yaml");

/// A running `serve` with the Envoy service, and where it answers gRPC.
pub struct Envoy {
    pub serve: Serve,
    pub grpc: String,
}

/// Starts `serve` on the test rules with `env`, and, when set, `open_files`
/// as its `ulimit -n`.
pub async fn start(env: &[(&str, &str)], open_files: Option<u64>) -> Envoy {
    let config = settings_file(&format!("[rate_limit]\nsingle_instance = true\nenvoy_config = \"{RULES}\"\n"));
    let grpc = format!("127.0.0.1:{}", free_port());
    let args = ["--grpc-listen", grpc.as_str()];
    let serve =
        Serve::start_with(Start { config: Some(&config), env, args: &args, open_files, ..Start::default() }).await;
    Envoy { serve, grpc }
}

/// A call on a new connection that must be answered OK within `limit`.
pub async fn answered_within(grpc: &str, limit: Duration) {
    let value = format!("bystander-{}", rand_suffix());
    let counted = request("test", &[&[("roomy", &value)]]);
    let asked = call_once(grpc, &counted);
    let answer = tokio::time::timeout(limit, asked).await.unwrap_or_else(|_| panic!("no answer within {limit:?}"));
    assert_eq!(answer.ok().statuses.len(), 1);
}

/// A gRPC call's outcome: its status code (0 is OK) and message, and the
/// response when there is one.
#[derive(Debug)]
pub struct Answer {
    pub code: i32,
    pub message: String,
    pub response: Option<RateLimitResponse>,
}

impl Answer {
    /// The response of an OK call; panics with the status otherwise.
    pub fn ok(self) -> RateLimitResponse {
        assert_eq!(self.code, 0, "{self:?}");
        self.response.expect("an OK call has a response")
    }
}

/// An HTTP/2 connection to `addr` (its driver runs on a task of its own,
/// answering the server's pings, until the handle and its clones drop).
pub async fn connect(addr: &str) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    send
}

/// `message` as one gRPC frame: not compressed, its length, its bytes.
pub fn frame(message: &[u8]) -> Bytes {
    let mut bytes = Vec::with_capacity(5 + message.len());
    bytes.push(0);
    bytes.extend_from_slice(&u32::try_from(message.len()).unwrap().to_be_bytes());
    bytes.extend_from_slice(message);
    bytes.into()
}

/// A request of `domain` whose descriptors are `descriptors`, each a list
/// of `(key, value)` entries.
pub fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    let descriptor = |entries: &&[(&str, &str)]| RateLimitDescriptor {
        entries: entries.iter().map(|(k, v)| Entry { key: (*k).into(), value: (*v).into() }).collect(),
        ..Default::default()
    };
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(descriptor).collect(),
        hits_addend: 0,
    }
}

/// One call of `body` (the bytes after the HTTP/2 headers) with `metadata`;
/// the server must answer within 10 s.
pub async fn call_raw(send: &h2::client::SendRequest<Bytes>, metadata: &[(&str, &str)], body: Bytes) -> Answer {
    call_at(send, PATH, metadata, body).await
}

/// [`call_raw`] to the method at `path`.
pub async fn call_at(
    send: &h2::client::SendRequest<Bytes>,
    path: &str,
    metadata: &[(&str, &str)],
    body: Bytes,
) -> Answer {
    let mut head = head(path);
    for (name, value) in metadata {
        head.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_str(value).unwrap(),
        );
    }
    let answered = async {
        let mut send = send.clone().ready().await.expect("the connection takes a stream");
        let (response, mut stream) = send.send_request(head, false).unwrap();
        stream.send_data(body, true).unwrap();
        let response = response.await.expect("an HTTP/2 response");
        let headers = response.headers().clone();
        let mut body = response.into_body();
        let mut data = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.expect("the response's body");
            body.flow_control().release_capacity(chunk.len()).unwrap();
            data.extend_from_slice(&chunk);
        }
        let trailers = body.trailers().await.expect("the trailers").unwrap_or_default();
        let status =
            |name: &str| trailers.get(name).or_else(|| headers.get(name)).map(|v| v.to_str().unwrap().to_owned());
        let code = status("grpc-status").expect("a grpc-status").parse().unwrap();
        let message = status("grpc-message").unwrap_or_default();
        let message = percent_decode(&message);
        let response = (data.len() >= 5).then(|| RateLimitResponse::decode(&data[5..]).expect("a RateLimitResponse"));
        Answer { code, message, response }
    };
    tokio::time::timeout(Duration::from_secs(10), answered).await.expect("an answer within 10 s")
}

/// The headers of a gRPC call to the method at `path`.
pub fn head(path: &str) -> http::Request<()> {
    http::Request::post(format!("http://127.0.0.1{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// One call of `request` with `metadata`.
pub async fn call(
    send: &h2::client::SendRequest<Bytes>,
    metadata: &[(&str, &str)],
    request: &RateLimitRequest,
) -> Answer {
    call_raw(send, metadata, frame(&request.encode_to_vec())).await
}

/// One call of `request` on a new connection to `addr`.
pub async fn call_once(addr: &str, request: &RateLimitRequest) -> Answer {
    call(&connect(addr).await, &[], request).await
}

/// `grpc-message` is percent-encoded.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/2 frame: its type, flags, stream and payload.
pub fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, flags];
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// An HTTP/2 frame as read: its type, stream and payload.
pub struct Frame {
    pub kind: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            3 => 0,
            7 => 4,
            _ => return None,
        };
        self.payload.get(at..at + 4).map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    }
}

/// The frames a server sends on `reader` until it closes or is silent for `idle`.
pub async fn read_frames(reader: &mut (impl AsyncRead + Unpin), idle: Duration) -> Vec<Frame> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    while let Ok(Ok(n @ 1..)) = tokio::time::timeout(idle, reader.read(&mut buf)).await {
        got.extend_from_slice(&buf[..n]);
    }
    let mut frames = Vec::new();
    let mut at = 0;
    while got.len() >= at + 9 {
        let len = usize::from(got[at]) << 16 | usize::from(got[at + 1]) << 8 | usize::from(got[at + 2]);
        let stream = u32::from_be_bytes(got[at + 5..at + 9].try_into().unwrap()) & 0x7fff_ffff;
        let payload = got[at + 9..(at + 9 + len).min(got.len())].to_vec();
        frames.push(Frame { kind: got[at + 3], stream, payload });
        at += 9 + len;
    }
    frames
}

/// The HPACK block of a gRPC call's headers on the wire, each header a
/// literal (never indexed, no Huffman), then `extra` as given.
pub fn hpack(extra: &[(&str, &[u8])]) -> Vec<u8> {
    let mut block = Vec::new();
    let mut literal = |name: &[u8], value: &[u8]| {
        block.push(0x10);
        integer(&mut block, name.len());
        block.extend_from_slice(name);
        integer(&mut block, value.len());
        block.extend_from_slice(value);
    };
    literal(b":method", b"POST");
    literal(b":scheme", b"http");
    literal(b":path", PATH.as_bytes());
    literal(b":authority", b"127.0.0.1");
    literal(b"content-type", b"application/grpc");
    literal(b"te", b"trailers");
    for (name, value) in extra {
        literal(name.as_bytes(), value);
    }
    block
}

/// An HPACK string length: a 7-bit prefix, then 7 bits a byte.
fn integer(out: &mut Vec<u8>, mut n: usize) {
    if n < 127 {
        out.push(u8::try_from(n).unwrap());
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push(u8::try_from(n % 128 + 128).unwrap());
        n /= 128;
    }
    out.push(u8::try_from(n).unwrap());
}
