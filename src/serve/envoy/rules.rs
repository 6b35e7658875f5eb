//! The rules of envoy's ratelimit service format, as loaded: per domain, a
//! tree of descriptor entries (`key` or `key_value`), some with a rule.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as ProtoUnit;

use limit_store::limits::Algorithm;

/// A rule's unit of time. Envoy's month is 30 days and its year 365.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A second.
    Second,
    /// A minute.
    Minute,
    /// An hour.
    Hour,
    /// A day.
    Day,
    /// A week.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// The unit `name` (any case) names, as envoy's YAML spells it.
    pub fn named(name: &str) -> Option<Unit> {
        Some(match name.to_ascii_uppercase().as_str() {
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Month,
            "YEAR" => Unit::Year,
            _ => return None,
        })
    }

    /// How long it lasts.
    pub fn duration(self) -> Duration {
        const DAY: u64 = 86_400;
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        })
    }

    /// The unit as the protocol numbers it.
    pub(super) fn proto(self) -> ProtoUnit {
        match self {
            Unit::Second => ProtoUnit::Second,
            Unit::Minute => ProtoUnit::Minute,
            Unit::Hour => ProtoUnit::Hour,
            Unit::Day => ProtoUnit::Day,
            Unit::Week => ProtoUnit::Week,
            Unit::Month => ProtoUnit::Month,
            Unit::Year => ProtoUnit::Year,
        }
    }
}

/// One `rate_limit` of the YAML, at the end of a descriptor path.
#[derive(Debug)]
#[non_exhaustive]
pub struct Rule {
    /// `domain.key_value.key`, envoy's name for the rule.
    pub path: String,
    /// The rule's `name`, when it has one.
    pub name: Option<String>,
    /// The budget per unit.
    pub requests_per_unit: u32,
    /// The unit.
    pub unit: Unit,
    /// Matched, answered OK, never counted.
    pub unlimited: bool,
    /// Counted and reported, never refuses.
    pub shadow: bool,
    /// How it counts: a fixed window of one unit; `None` for a budget of 0
    /// (every hit refused, nothing counted) or an unlimited rule.
    pub(super) algorithm: Option<Algorithm>,
}

impl Rule {
    pub(super) fn new(
        path: String,
        name: Option<String>,
        requests_per_unit: u32,
        unit: Unit,
        unlimited: bool,
        shadow: bool,
    ) -> Self {
        let algorithm = (!unlimited && requests_per_unit > 0)
            .then(|| Algorithm::fixed_window(u64::from(requests_per_unit), unit.duration()));
        Rule { path, name, requests_per_unit, unit, unlimited, shadow, algorithm }
    }

    /// What metrics call it: its `name`, or its path (from the YAML, never a
    /// value a request sent).
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.path)
    }
}

/// One level of a domain's descriptor tree.
#[derive(Debug, Default)]
pub(super) struct Node {
    /// By `key_value`, or `key` alone (the default for any value).
    pub(super) children: HashMap<String, Node>,
    /// The children whose `key_value` holds `*`: the map key, and the
    /// pattern split at each `*`, in file order.
    pub(super) wildcards: Vec<(String, Vec<String>)>,
    pub(super) rule: Option<Arc<Rule>>,
}

impl Node {
    pub(super) fn insert(&mut self, entry: String, node: Node) {
        if entry.contains('*') {
            self.wildcards.push((entry.clone(), entry.split('*').map(str::to_owned).collect()));
        }
        self.children.insert(entry, node);
    }
}

/// Every domain's rules, as loaded from the YAML files.
#[derive(Debug, Default)]
pub struct Rules {
    pub(super) domains: HashMap<String, Node>,
    pub(super) count: usize,
}

impl Rules {
    /// The domains, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut domains: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        domains.sort_unstable();
        domains
    }

    /// How many rules (`rate_limit`s) there are.
    pub fn len(&self) -> usize {
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::Rules;

    /// The first YAML block of the guide's Envoy page (`docs/guide/envoy.md`).
    fn guide_yaml() -> String {
        let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/guide/envoy.md")).unwrap();
        let block = page.split("```yaml\n").nth(1).and_then(|s| s.split("\n```").next());
        block.expect("the guide's Envoy page has its YAML blocks").to_owned()
    }

    #[test]
    fn the_guide_rules_parse() {
        let rules = Rules::parse(&guide_yaml(), "docs/guide/envoy.md").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((rules.domains(), rules.len()), (vec!["site"], 3));
    }
}
