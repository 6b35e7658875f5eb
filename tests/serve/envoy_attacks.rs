//! An outsider's attacks on the connections of `serve --grpc-listen` (Envoy's
//! rate limit service), against the real binary over real sockets: clients
//! that send nothing, half a frame, HTTP/1.1 or garbage; more connections
//! than `max_connections`, or than the open-file limit allows; more streams
//! than a connection takes; rapid reset and MadeYouReset; PING and SETTINGS
//! floods; a huge header block; SIGTERM with a call hanging. Through each,
//! other calls are answered.
//! The calls' own abuse (messages, descriptors, the token) is in
//! `envoy_messages.rs`. Timeouts are short here (`LIMIT_STORE_REQUEST_TIMEOUT`).

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use prost::Message as _;

use super::envoy_wire::{
    answered_within, connect, frame, head, hpack, raw_frame, read_frames, request, start, Frame, PATH, PREFACE,
};
use crate::common::serve::read_until_closed;

/// A raw connection that has sent `bytes`.
async fn sent(grpc: &str, bytes: &[u8]) -> TcpStream {
    let mut stream = TcpStream::connect(grpc).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    stream
}

/// The preface and an empty SETTINGS frame: an HTTP/2 connection begun.
fn begun() -> Vec<u8> {
    [PREFACE, &raw_frame(4, 0, 0, &[])].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_half_sent_connections_are_closed_and_others_answered_meanwhile() {
    let envoy = start(&[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], None).await;
    let started = Instant::now();
    let headers = hpack(&[]);
    let cases: [(&str, Vec<u8>); 6] = [
        ("nothing", Vec::new()),
        ("half the preface", PREFACE[..10].to_vec()),
        ("the preface alone", PREFACE.to_vec()),
        ("half a frame's header", [begun(), raw_frame(4, 0, 0, &[])[..4].to_vec()].concat()),
        ("a header block never ended", [begun(), raw_frame(1, 0, 1, &headers)].concat()),
        ("a stream whose message never comes", [begun(), raw_frame(1, 4, 1, &headers)].concat()),
    ];
    let mut idle = Vec::new();
    for (what, bytes) in &cases {
        for _ in 0..20 {
            idle.push((*what, sent(&envoy.grpc, bytes).await));
        }
    }
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
    for (what, stream) in &mut idle {
        let left = Duration::from_secs(6).saturating_sub(started.elapsed());
        assert!(read_until_closed(stream, left).await.is_some(), "{what}: still open after 6 s (timeout 1 s)");
    }
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_and_garbage_are_closed_at_once() {
    let envoy = start(&[], None).await;
    let garbage: Vec<u8> = (0..4096u32).map(|i| u8::try_from(i * 7919 % 251).unwrap()).collect();
    let cases: [(&str, &[u8]); 4] = [
        ("HTTP/1.1", b"POST /envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("h2c upgrade", b"GET / HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n\r\n"),
        ("garbage", &garbage),
        ("a bad frame after the preface", &[PREFACE, &[0xff; 64]].concat()),
    ];
    for (what, bytes) in cases {
        let mut stream = sent(&envoy.grpc, bytes).await;
        let got = read_until_closed(&mut stream, Duration::from_secs(2)).await;
        assert!(got.is_some(), "{what}: still open after 2 s");
        assert!(!got.unwrap().starts_with(b"HTTP/1.1 200"), "{what}: answered as HTTP/1.1");
    }
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_grpc_and_http_wait_for_a_place_they_share() {
    let envoy = start(&[("LIMIT_STORE_MAX_CONNECTIONS", "3")], None).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(sent(&envoy.grpc, &begun()).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let grpc = envoy.grpc.clone();
    let waiting = tokio::spawn(async move { answered_within(&grpc, Duration::from_secs(8)).await });
    let health = crate::common::serve::request(&envoy.serve.addr, "GET", "/healthz", &[], b"");
    assert!(tokio::time::timeout(Duration::from_secs(1), health).await.is_err(), "HTTP waits for a place too");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a fourth gRPC connection was served beside three");
    held.pop();
    waiting.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_few_open_files_a_grpc_flood_takes_no_file_from_http() {
    let envoy = start(&[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], Some(120)).await;
    let mut flood = Vec::new();
    for _ in 0..150 {
        flood.push(TcpStream::connect(&envoy.grpc).await.unwrap());
    }
    let health = crate::common::serve::request(&envoy.serve.addr, "GET", "/healthz", &[], b"");
    let r = tokio::time::timeout(Duration::from_secs(5), health).await.expect("/healthz within 5 s");
    assert_eq!(r.unwrap().status, 200);
    answered_within(&envoy.grpc, Duration::from_secs(5)).await;
}

/// The error code of the GOAWAY the server sends on `reader`, if it does.
async fn goaway_read(mut reader: tokio::net::tcp::OwnedReadHalf) -> Option<u32> {
    let frames = read_frames(&mut reader, Duration::from_secs(5)).await;
    frames.iter().find(|f| f.kind == 7).and_then(Frame::error_code)
}

/// Streams opened and reset, each by `frames(stream id)`, 500 a write for
/// 2 s, on one connection, while other calls are asked on others: the
/// code of the GOAWAY the server sent that connection, and how long the slowest other
/// call took.
async fn reset_flood(grpc: &str, frames: impl Fn(u32) -> Vec<u8> + Send + 'static) -> (Option<u32>, Duration) {
    let (reader, mut writer) = sent(grpc, &begun()).await.into_split();
    let goaway = tokio::spawn(goaway_read(reader));
    let flood = tokio::spawn(async move {
        let (started, mut stream) = (Instant::now(), 1u32);
        while started.elapsed() < Duration::from_secs(2) {
            let mut batch = Vec::new();
            for _ in 0..500 {
                batch.extend(frames(stream));
                stream += 2;
            }
            if writer.write_all(&batch).await.is_err() {
                break;
            }
        }
    });
    let mut slowest = Duration::ZERO;
    while !flood.is_finished() {
        let asked = Instant::now();
        answered_within(grpc, Duration::from_secs(2)).await;
        slowest = slowest.max(asked.elapsed());
    }
    (goaway.await.unwrap(), slowest)
}

/// CVE-2023-44487: streams opened and reset by the client at once; and
/// CVE-2025-8671 (MadeYouReset): whole calls, each followed by a frame
/// that makes the server reset it (DATA after the end of the stream), so
/// its work would go on outside the cap on streams. Both are sent GOAWAY
/// with ENHANCE_YOUR_CALM.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_floods_are_sent_away_and_others_are_answered_meanwhile() {
    let envoy = start(&[], None).await;
    let headers = hpack(&[]);
    let (heads, message) = (headers.clone(), request("test", &[&[("free", "x")]]).encode_to_vec());
    let rapid = move |id: u32| [raw_frame(1, 4, id, &heads), raw_frame(3, 0, id, &8u32.to_be_bytes())].concat();
    let made_you_reset = move |id: u32| {
        let call = [raw_frame(1, 4, id, &headers), raw_frame(0, 1, id, &frame(&message))];
        [call.concat(), raw_frame(8, 0, id, &0x7fff_ffffu32.to_be_bytes())].concat()
    };
    for (what, (goaway, slowest)) in [
        ("rapid reset", reset_flood(&envoy.grpc, rapid).await),
        ("MadeYouReset", reset_flood(&envoy.grpc, made_you_reset).await),
    ] {
        assert_eq!(goaway, Some(11), "{what}: GOAWAY with ENHANCE_YOUR_CALM");
        assert!(slowest < Duration::from_secs(1), "{what}: a call took {slowest:?} during the flood");
    }
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

/// Past 100 streams open on a connection, more are refused; the first 100
/// wait for their messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_100_open_streams_a_connection_has_more_refused() {
    let envoy = start(&[], None).await;
    let headers = hpack(&[]);
    let mut bytes = begun();
    for id in (1..=299).step_by(2) {
        bytes.extend(raw_frame(1, 4, id, &headers));
    }
    let mut stream = sent(&envoy.grpc, &bytes).await;
    let frames = read_frames(&mut stream, Duration::from_secs(1)).await;
    let refused: Vec<u32> =
        frames.iter().filter(|f| f.kind == 3 && f.error_code() == Some(7)).map(|f| f.stream).collect();
    assert_eq!(refused, (201..=299).step_by(2).collect::<Vec<_>>(), "REFUSED_STREAM past the 100th");
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A connection begun, then `frame` sent again and again, whole, for a
/// second or until writes block, without reading anything back: its
/// reading half, and the writer that holds its writing half open.
async fn flood(grpc: &str, frame: &[u8]) -> (tokio::net::tcp::OwnedReadHalf, tokio::task::JoinHandle<impl Sized>) {
    let (reader, mut writer) = sent(grpc, &begun()).await.into_split();
    let chunk = frame.repeat(1000);
    let writing = tokio::spawn(async move {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(1) && writer.write_all(&chunk).await.is_ok() {}
        writer
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    (reader, writing)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_and_settings_floods_from_a_client_that_reads_nothing_are_bounded() {
    let envoy = start(&[("LIMIT_STORE_REQUEST_TIMEOUT", "1s")], None).await;
    let before = rss_kib(envoy.serve.child.id());
    let started = Instant::now();
    let ping = flood(&envoy.grpc, &raw_frame(6, 0, 0, &[7; 8])).await;
    let settings = flood(&envoy.grpc, &raw_frame(4, 0, 0, &[0, 3, 0, 0, 0, 100])).await;
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
    let grown = rss_kib(envoy.serve.child.id()).saturating_sub(before);
    assert!(grown < 32 * 1024, "serve grew {grown} KiB during the floods");
    for (what, (mut reader, _writing)) in [("PING", ping), ("SETTINGS", settings)] {
        let mut buf = vec![0; 64 * 1024];
        let closed = loop {
            let left = Duration::from_secs(7).saturating_sub(started.elapsed());
            match tokio::time::timeout(left, reader.read(&mut buf)).await {
                Err(_) => break false,
                Ok(Ok(0) | Err(_)) => break true,
                Ok(Ok(_)) => {}
            }
        };
        assert!(closed, "a {what} flood's connection is closed within 7 s (timeout 1 s)");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_header_block_is_refused_and_others_answered() {
    let envoy = start(&[], None).await;
    let value = vec![b'a'; 200 * 1024];
    let block = hpack(&[("x-huge", &value)]);
    let mut bytes = begun();
    let mut pieces = block.chunks(16 * 1024).peekable();
    bytes.extend(raw_frame(1, 0, 1, pieces.next().unwrap()));
    while let Some(piece) = pieces.next() {
        bytes.extend(raw_frame(9, if pieces.peek().is_none() { 4 } else { 0 }, 1, piece));
    }
    let mut stream = TcpStream::connect(&envoy.grpc).await.unwrap();
    let _ = stream.write_all(&bytes).await;
    let kinds: Vec<u8> = read_frames(&mut stream, Duration::from_secs(2)).await.iter().map(|f| f.kind).collect();
    // GOAWAY (7), or RST_STREAM (3) after a 431 (HEADERS, 1): refused either way.
    assert!(kinds.contains(&7) || kinds.contains(&3), "frames sent back: {kinds:?}");
    answered_within(&envoy.grpc, Duration::from_secs(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_call_hanging_exits_0_within_the_grace() {
    let env = [("LIMIT_STORE_REQUEST_TIMEOUT", "30s"), ("LIMIT_STORE_SHUTDOWN_GRACE", "1s")];
    let mut envoy = start(&env, None).await;
    let send = connect(&envoy.grpc).await;
    let request_head = head(PATH);
    let (_response, _stream) = send.clone().ready().await.unwrap().send_request(request_head, false).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    envoy.serve.signal("TERM");
    let status = envoy.serve.exit_within(Duration::from_secs(4)).await;
    assert!(status.is_some_and(|s| s.success()), "exit 0 within the grace (1 s) and a little: {status:?}");
}
