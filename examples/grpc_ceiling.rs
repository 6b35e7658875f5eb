//! The gRPC ceiling for `bench/serve.sh`: a bare tonic handler of Envoy's
//! rate limit service that answers every `ShouldRateLimit` with the message
//! `serve --grpc-listen` gives one descriptor (OK, its limit, what is left,
//! the time to reset), and counts nothing.
//! `cargo run --release --example grpc_ceiling --features cli -- ADDR`.

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    rate_limit::Unit, Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration;
use tonic::{Request, Response, Status};

struct Bare;

#[tonic::async_trait]
impl RateLimitService for Bare {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let status = DescriptorStatus {
            code: Code::Ok.into(),
            current_limit: Some(RateLimit {
                name: String::new(),
                requests_per_unit: 4_000_000_000,
                unit: Unit::Hour.into(),
            }),
            limit_remaining: 3_999_999_999,
            duration_until_reset: Some(Duration { seconds: 3_599, nanos: 0 }),
            quota: None,
        };
        let statuses = vec![status; request.get_ref().descriptors.len()];
        Ok(Response::new(RateLimitResponse { overall_code: Code::Ok.into(), statuses, ..Default::default() }))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:8091".into()).parse()?;
    tonic::transport::Server::builder().add_service(RateLimitServiceServer::new(Bare)).serve(addr).await?;
    Ok(())
}
