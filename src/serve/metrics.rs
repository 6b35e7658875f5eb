//! `GET /metrics`: Prometheus text exposition, through `prometheus-client`.
//! Labels are the limit, the outcome, the reason, the route and the status:
//! never a key, an account or an address, so their number stays small.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use limit_store::error::Unavailable;
use limit_store::{Decision, StoreStats};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Attempt {
    limit: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: ReasonLabel,
}

/// A reason as its label's value: its text, written with no `String` made
/// for each answer counted.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct ReasonLabel(Unavailable);

impl EncodeLabelValue for ReasonLabel {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        write!(encoder, "{}", self.0)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Http {
    route: String,
    status: u16,
}

/// The service's metrics.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    attempts: Family<Attempt, Counter>,
    unavailable: Family<Reason, Counter>,
    store_seconds: Histogram,
    in_flight: Gauge,
    live_entries: Gauge,
    fill_ratio: Gauge<f64, AtomicU64>,
    sweeps: Gauge,
    swept: Gauge,
    http: Family<Http, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric, registered.
    pub fn new() -> Self {
        let m = Metrics {
            registry: Registry::with_prefix("limit_store"),
            attempts: Family::default(),
            unavailable: Family::default(),
            store_seconds: Histogram::new(exponential_buckets(0.000_05, 2.0, 16)),
            in_flight: Gauge::default(),
            live_entries: Gauge::default(),
            fill_ratio: Gauge::default(),
            sweeps: Gauge::default(),
            swept: Gauge::default(),
            http: Family::default(),
        };
        let mut m = m;
        let r = &mut m.registry;
        r.register(
            "attempts",
            "Attempts by limit and outcome (allowed, limited, degraded, shadow)",
            m.attempts.clone(),
        );
        r.register(
            "unavailable",
            "Attempts answered by a limit's policy, by why the store was unavailable",
            m.unavailable.clone(),
        );
        r.register(
            "store_call_seconds",
            "How long a limit's store call took, through its guard",
            m.store_seconds.clone(),
        );
        r.register("store_calls_in_flight", "Store calls this service is waiting on now", m.in_flight.clone());
        r.register("live_entries", "Entries the store's bound counts now", m.live_entries.clone());
        r.register("fill_ratio", "Live entries over the store's bound", m.fill_ratio.clone());
        r.register("sweeps", "Sweeps the store has run since it started", m.sweeps.clone());
        r.register("swept_entries", "Expired entries those sweeps removed", m.swept.clone());
        r.register("http_requests", "HTTP requests by route and status", m.http.clone());
        m
    }

    /// The registry, for the metrics of serve's other listeners (the Envoy
    /// service's), added before serving.
    pub fn registry_mut(&mut self) -> &mut Registry {
        &mut self.registry
    }

    /// A store call is starting; dropping the answer ends it.
    pub fn call(&self) -> Call<'_> {
        self.in_flight.inc();
        Call { metrics: self, started: std::time::Instant::now() }
    }

    /// Counts one decision of limit `limit` on an attempt of `cost`: a
    /// check (cost 0) counts nothing, so it is no attempt allowed or
    /// limited; only a store that could not answer it is counted.
    pub fn decided(&self, limit: &str, d: &Decision, cost: u64) {
        if let Some(reason) = d.degraded {
            self.unavailable.get_or_create(&Reason { reason: ReasonLabel(reason) }).inc();
        }
        if cost == 0 {
            return;
        }
        let outcome = match (d.degraded, d.shadow_refused, d.allowed) {
            (Some(_), _, _) => "degraded",
            (None, true, _) => "shadow",
            (None, false, true) => "allowed",
            (None, false, false) => "limited",
        };
        self.attempts.get_or_create(&Attempt { limit: limit.to_owned(), outcome }).inc();
    }

    /// The unavailable answers so far, by reason.
    pub fn unavailable_by_reason(&self) -> Vec<(Unavailable, u64)> {
        [Unavailable::Timeout, Unavailable::Overloaded, Unavailable::Full, Unavailable::StoreFailed]
            .into_iter()
            .map(|r| (r, self.unavailable.get_or_create(&Reason { reason: ReasonLabel(r) }).get()))
            .collect()
    }

    /// Counts one HTTP answer.
    pub fn answered(&self, route: &str, status: u16) {
        self.http.get_or_create(&Http { route: route.to_owned(), status }).inc();
    }

    /// The exposition, with the store's fill read now.
    pub fn render(&self, stats: Option<StoreStats>) -> String {
        if let Some(stats) = stats {
            self.live_entries.set(i64::try_from(stats.held).unwrap_or(i64::MAX));
            #[allow(clippy::cast_precision_loss)] // a ratio for a dashboard
            self.fill_ratio.set(stats.held as f64 / stats.max_entries.max(1) as f64);
            self.sweeps.set(i64::try_from(stats.sweeps).unwrap_or(i64::MAX));
            self.swept.set(i64::try_from(stats.swept).unwrap_or(i64::MAX));
        }
        let mut text = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

/// One store call in flight: observed when dropped.
pub struct Call<'a> {
    metrics: &'a Metrics,
    started: std::time::Instant,
}

impl Drop for Call<'_> {
    fn drop(&mut self) {
        self.metrics.in_flight.dec();
        self.metrics.store_seconds.observe(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Metrics;
    use limit_store::error::Unavailable;
    use limit_store::{Limits, MemoryStore};

    /// An answer of an unavailable store is counted under its reason's
    /// text, the label a dashboard selects on.
    #[tokio::test]
    async fn unavailable_answers_are_labelled_by_their_reason() {
        let limits =
            Limits::builder().store(Arc::new(MemoryStore::with_max_entries(1))).single_instance(true).build().unwrap();
        let metrics = Metrics::new();
        for client in ["c-1", "c-2"] {
            let d = limits.attempt("api", &[("client", client)]).await.unwrap();
            metrics.decided("api", &d, 1);
        }
        let text = metrics.render(None);
        assert!(text.contains(r#"reason="full"} 1"#), "{text}");
        assert!(metrics.unavailable_by_reason().contains(&(Unavailable::Full, 1)));
    }
}
