//! The Envoy service's metrics, in serve's `/metrics`: descriptors answered
//! per rule (allowed, over limit, shadow) and requests the store could not
//! answer. Labels are the domain and the rule's name or path, both from the
//! YAML: never a descriptor value a request sent.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::counting::Answered;
use super::rules::Rule;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabels {
    rule: String,
    outcome: &'static str,
}

/// Counters of the Envoy service. Cheap to clone: clones count together.
#[derive(Clone, Debug, Default)]
pub struct EnvoyMetrics {
    answers: Family<RuleLabels, Counter>,
    unavailable: Counter,
}

impl EnvoyMetrics {
    /// Adds the counters to `registry` (serve's, for `/metrics`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "envoy_descriptors",
            "Envoy descriptors answered, by rule (its name or path) and outcome (allowed, over_limit, shadow)",
            self.answers.clone(),
        );
        registry.register(
            "envoy_unavailable",
            "ShouldRateLimit calls answered UNAVAILABLE because the store did not answer",
            self.unavailable.clone(),
        );
    }

    /// Counts one descriptor's answer.
    pub(super) fn answered(&self, rule: &Rule, said: Answered) {
        let outcome = match said {
            Answered::Allowed => "allowed",
            Answered::OverLimit => "over_limit",
            Answered::Shadow => "shadow",
        };
        self.answers.get_or_create(&RuleLabels { rule: rule.label().to_owned(), outcome }).inc();
    }

    /// Counts one call the store could not answer.
    pub(super) fn unavailable(&self) {
        self.unavailable.inc();
    }
}
