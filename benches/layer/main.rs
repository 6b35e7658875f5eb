//! What the axum layer adds to a request, side by side with `tower_governor`
//! on the same trivial router in the same run.
//!
//! Every contender answers `GET /` with `"ok"` through `Router::oneshot`,
//! from the next of 1,024 peer addresses (`ConnectInfo`), cycling, inside one
//! `block_on` of a current-thread runtime per sample. Each router is made
//! ready with `with_state(())` first, as `axum::serve` does; without it axum
//! reapplies every layer to the route on every request.
//!
//! - `bare`: the router alone, the baseline;
//! - `limit_layer`: `LimitLayer` keyed by `PeerIp` on a GCRA limit per `ip`
//!   (normalized as an IP), on the memory store behind its guard, writing the
//!   RateLimit fields on every answer;
//! - `limit_layer_fields_on_refusals`: the same with
//!   `fields_on_admitted(false)`: the fields on refusals only;
//! - `tower_governor`: `GovernorLayer` with its default `PeerIpKeyExtractor`,
//!   no headers;
//! - `tower_governor_headers`: the same with `use_headers()` (its
//!   `x-ratelimit-*` headers on every answer, as ours writes its fields).
//!
//! - `limits_attempt_alone`: `Limits::attempt` on the same limit, without
//!   HTTP: the part of `limit_layer`'s added latency that is the count.
//!
//! Budgets are huge: nothing is refused; we measure the cost of counting.
//! Added latency = contender's ns/request - `bare`'s, from criterion's means;
//! the table gives it over tower_governor's without headers, and over the
//! same work's: `limit_layer` over `tower_governor_headers` (fields or
//! headers on every answer), `limit_layer_fields_on_refusals` over
//! `tower_governor`.
//!
//! Criterion's means move with the host between contenders; the paired
//! rounds printed after them (`paired.rs`) don't.
//!
//! Run: `cargo bench --bench layer --features axum` (about 50 s once built),
//! or with `LIMIT_STORE_BENCH_QUICK=1` for a rough pass, or with
//! `LIMIT_STORE_BENCH_PAIRED=1` for the paired rounds alone. For instruction
//! counts, `LIMIT_STORE_BENCH_COUNT=<contender>:<n>` only sends requests
//! through that contender, untimed: a warm-up, then `n` in `counted`, for
//! `valgrind --tool=callgrind --toggle-collect=layer::counted`.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::Request;
use axum::routing::get;
use axum::Router;
use criterion::{Criterion, SamplingMode};
use limit_store::layer::{LimitLayer, PeerIp};
use limit_store::limits::{Algorithm, Normalize, Part};
use limit_store::{Limit, Limits, MemoryStore};
use tower::ServiceExt;
use tower_governor::governor::GovernorConfigBuilder;
use tower_governor::GovernorLayer;

#[path = "../common/figures.rs"]
mod figures;
mod paired;

const GROUP: &str = "layer";
const BARE: &str = "bare";
const OURS: &str = "limit_layer";
const OURS_REFUSALS: &str = "limit_layer_fields_on_refusals";
const GOVERNOR: &str = "tower_governor";
const GOVERNOR_HEADERS: &str = "tower_governor_headers";
const ATTEMPT: &str = "limits_attempt_alone";
const PEERS: u32 = 1_024;

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" }))
}

fn ours() -> Router {
    router().layer(LimitLayer::new(per_ip(), "per-ip", "ip", PeerIp).unwrap())
}

/// `LimitLayer` sending the RateLimit fields on refusals only, as
/// `tower_governor` sends its headers only when asked.
fn ours_refusals() -> Router {
    router().layer(LimitLayer::new(per_ip(), "per-ip", "ip", PeerIp).unwrap().fields_on_admitted(false))
}

fn per_ip() -> Limits {
    // One refill a second, bursts of ten million: never refused in a run.
    let algorithm = Algorithm::gcra(10_000_000, Duration::from_secs(10_000_000));
    Limits::builder()
        .store(Arc::new(MemoryStore::new()))
        .single_instance(true)
        .limit(Limit::new("per-ip").part(Part::new("ip", algorithm).normalized(Normalize::Ip)))
        .build()
        .unwrap()
}

/// `iters` calls of `Limits::attempt` alone, as the layer makes them: what
/// the limit costs without HTTP.
fn attempt_alone(runtime: &tokio::runtime::Runtime, limits: &Limits, ips: &[String], iters: u64) -> Duration {
    runtime.block_on(async {
        let start = Instant::now();
        for (_, ip) in (0..iters).zip(ips.iter().cycle()) {
            let decision = limits.attempt("per-ip", &[("ip", ip)]).await.unwrap();
            assert!(decision.allowed);
            black_box(decision);
        }
        start.elapsed()
    })
}

fn governor() -> Router {
    let config = GovernorConfigBuilder::default().per_nanosecond(1).burst_size(u32::MAX).finish().unwrap();
    router().layer(GovernorLayer::new(config))
}

fn governor_headers() -> Router {
    let config =
        GovernorConfigBuilder::default().per_nanosecond(1).burst_size(u32::MAX).use_headers().finish().unwrap();
    router().layer(GovernorLayer::new(config))
}

fn peers() -> Vec<SocketAddr> {
    (0..PEERS).map(|i| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0xC000_0200 + i)), 40_000)).collect()
}

/// `iters` requests through `app`, timed.
fn run(runtime: &tokio::runtime::Runtime, app: &Router, peers: &[SocketAddr], iters: u64) -> Duration {
    runtime.block_on(async {
        let start = Instant::now();
        for (_, &peer) in (0..iters).zip(peers.iter().cycle()) {
            let mut request = Request::get("/").body(Body::empty()).unwrap();
            request.extensions_mut().insert(ConnectInfo(peer));
            let response = app.clone().oneshot(request).await.unwrap();
            assert!(response.status().is_success(), "refused: {}", response.status());
            black_box(response);
        }
        start.elapsed()
    })
}

fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target").join("criterion")
}

/// The mean ns per request of `function` in this run, with its 95% interval.
fn mean(home: &Path, function: &str, since: SystemTime) -> Option<(f64, f64, f64)> {
    let path = home.join(GROUP).join(function).join("new").join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < since {
        return None;
    }
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let mean = &json["mean"];
    Some((
        mean["point_estimate"].as_f64()?,
        mean["confidence_interval"]["lower_bound"].as_f64()?,
        mean["confidence_interval"]["upper_bound"].as_f64()?,
    ))
}

fn print_table(home: &Path, since: SystemTime) {
    let Some((bare, ..)) = mean(home, BARE, since) else {
        println!("No estimate of `bare` from this run under {}: no table.", home.display());
        return;
    };
    let added = |f: &str| mean(home, f, since).map(|(m, lo, hi)| (m, lo, hi, m - bare));
    let ratio = |a: f64, peer: &str| match added(peer) {
        Some((.., p)) if p > 0.0 => format!("{:.2}x", a / p),
        _ => "-".into(),
    };
    println!();
    println!(
        "| contender | ns/request (mean) | 95% CI | added to bare | ÷ tower_governor's added | ÷ the same work's |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for function in [BARE, GOVERNOR, GOVERNOR_HEADERS, OURS, OURS_REFUSALS] {
        let Some((m, lo, hi, a)) = added(function) else { continue };
        // Like for like: with the fields or headers on every answer, or without.
        let (all, same) = match function {
            BARE => ("-".into(), "-".into()),
            OURS => (ratio(a, GOVERNOR), ratio(a, GOVERNOR_HEADERS)),
            OURS_REFUSALS => (ratio(a, GOVERNOR), ratio(a, GOVERNOR)),
            _ => (ratio(a, GOVERNOR), "-".into()),
        };
        println!("| {function} | {m:.0} | {lo:.0}-{hi:.0} | {a:.0} | {all} | {same} |");
    }
    if let Some((m, lo, hi)) = mean(home, ATTEMPT, since) {
        println!("| of which `Limits::attempt` alone (no HTTP) | {m:.0} | {lo:.0}-{hi:.0} | - | - |");
    }
}

/// `LIMIT_STORE_BENCH_COUNT=<contender>:<n>`: `n` requests through one
/// contender and nothing else, for an instruction count.
fn count_only() -> bool {
    let Some(spec) = std::env::var_os("LIMIT_STORE_BENCH_COUNT") else { return false };
    let spec = spec.to_string_lossy();
    let (function, n) = spec.split_once(':').expect("<contender>:<n>");
    let app = match function {
        BARE => router(),
        GOVERNOR => governor(),
        GOVERNOR_HEADERS => governor_headers(),
        OURS => ours(),
        OURS_REFUSALS => ours_refusals(),
        other => panic!("no contender {other}"),
    };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (app, peers) = (app.with_state(()), peers());
    // Every peer counted once, and every first use paid (a clock's
    // calibration takes more instructions in one process than in another).
    run(&runtime, &app, &peers, u64::from(PEERS) * 2);
    counted(&runtime, &app, &peers, n.parse().expect("a count"));
    true
}

/// The requests whose instructions are counted: `bench/instructions.sh`
/// runs callgrind collecting only inside this function.
#[inline(never)]
fn counted(runtime: &tokio::runtime::Runtime, app: &Router, peers: &[SocketAddr], n: u64) {
    black_box(run(runtime, app, peers, n));
}

fn main() {
    if count_only() {
        return;
    }
    let since = SystemTime::now();
    let home = criterion_home();
    let quick = std::env::var_os("LIMIT_STORE_BENCH_QUICK").is_some_and(|v| v != "0");
    let (warm_up, measure) = if quick {
        (Duration::from_millis(300), Duration::from_secs(1))
    } else {
        (Duration::from_secs(1), Duration::from_secs(5))
    };
    let mut c = Criterion::default()
        .output_directory(&home)
        .warm_up_time(warm_up)
        .measurement_time(measure)
        .sample_size(30)
        .configure_from_args();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let peers = peers();
    paired::alone(&runtime, &apps(), &peers);
    {
        let mut g = c.benchmark_group(GROUP);
        g.sampling_mode(SamplingMode::Flat);
        for (function, app) in apps() {
            g.bench_function(function, |b| b.iter_custom(|iters| run(&runtime, &app, &peers, iters)));
        }
        let limits = per_ip();
        let ips: Vec<String> = peers.iter().map(|p| p.ip().to_string()).collect();
        g.bench_function(ATTEMPT, |b| b.iter_custom(|iters| attempt_alone(&runtime, &limits, &ips, iters)));
        g.finish();
    }
    c.final_summary();
    print_table(&home, since);
    paired::print_table(&runtime, &apps(), &peers);
}

/// Every contender's router, ready as `axum::serve` makes it once: the
/// routes built, not remade (and their layers reapplied) on every request.
fn apps() -> Vec<(&'static str, Router)> {
    [
        (BARE, router()),
        (GOVERNOR, governor()),
        (GOVERNOR_HEADERS, governor_headers()),
        (OURS, ours()),
        (OURS_REFUSALS, ours_refusals()),
    ]
    .into_iter()
    .map(|(name, app)| (name, app.with_state(())))
    .collect()
}
