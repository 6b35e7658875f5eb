//! The gRPC load client of `bench/serve.sh` (no ghz on this machine): `STREAMS`
//! calls of `ShouldRateLimit` kept in flight on one HTTP/2 connection, as one
//! Envoy worker keeps them, for `SECS` seconds; prints requests per second,
//! p50 and p99, and how many answers were not OK.
//! `cargo run --release --example grpc_load --features cli -- ADDR STREAMS SECS`
//!
//! Each stream asks for its own descriptor `client=sN` of domain `bench`.

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{rate_limit_descriptor::Entry, RateLimitDescriptor};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let addr = args.get(1).cloned().unwrap_or_else(|| "127.0.0.1:8091".into());
    let streams: usize = args.get(2).map_or(Ok(32), |s| s.parse())?;
    let secs: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?.tcp_nodelay(true).connect().await?;
    let until = Instant::now() + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let mut client = RateLimitServiceClient::new(channel.clone());
            tokio::spawn(async move {
                let descriptor = RateLimitDescriptor {
                    entries: vec![Entry { key: "client".into(), value: format!("s{s}") }],
                    ..Default::default()
                };
                let request =
                    RateLimitRequest { domain: "bench".into(), descriptors: vec![descriptor], hits_addend: 0 };
                let (mut took, mut not_ok) = (Vec::new(), 0u64);
                while Instant::now() < until {
                    let started = Instant::now();
                    let answer = client.should_rate_limit(request.clone()).await;
                    took.push(started.elapsed());
                    if !matches!(answer, Ok(a) if a.get_ref().overall_code == i32::from(Code::Ok)) {
                        not_ok += 1;
                    }
                }
                (took, not_ok)
            })
        })
        .collect();
    let (mut took, mut not_ok) = (Vec::new(), 0);
    for task in tasks {
        let (t, n) = task.await?;
        took.extend(t);
        not_ok += n;
    }
    took.sort_unstable();
    // The call at `percent` of the sorted latencies.
    let at = |percent: usize| took.get(took.len() * percent / 100).copied().unwrap_or_default();
    println!(
        "requests/s {} p50 {:.2}ms p99 {:.2}ms not_ok {not_ok}",
        u64::try_from(took.len()).unwrap_or(u64::MAX) / secs.max(1),
        at(50).as_secs_f64() * 1e3,
        at(99).as_secs_f64() * 1e3
    );
    Ok(())
}
