//! Which rule a descriptor counts against, found as envoy's ratelimit
//! service finds it: walk the domain's tree one entry at a time, taking at
//! each level the child for `key_value`, else the first wildcard child whose
//! pattern matches `key_value`, else the child for `key` alone (the default
//! for any value). The rule is the one on the node the last entry reaches; a
//! descriptor longer or shorter than the tree's paths matches no rule.

use std::sync::Arc;

use super::rules::{Node, Rule, Rules};

impl Rules {
    /// The rule the descriptor `entries` (`(key, value)` pairs) match in
    /// `domain`; `None` for an unknown domain or a descriptor no rule matches.
    pub fn matching<'a>(
        &self,
        domain: &str,
        entries: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&Arc<Rule>> {
        let mut node = self.domains.get(domain)?;
        let last = entries.len().checked_sub(1)?;
        let mut full = String::new();
        for (i, (key, value)) in entries.enumerate() {
            full.clear();
            full.push_str(key);
            full.push('_');
            full.push_str(value);
            let next = child(node, &full).or_else(|| node.children.get(key))?;
            if i == last {
                return next.rule.as_ref();
            }
            if next.children.is_empty() {
                return None;
            }
            node = next;
        }
        None
    }
}

/// The child of `node` for `key_value` exactly, else by a wildcard.
fn child<'n>(node: &'n Node, full: &str) -> Option<&'n Node> {
    node.children.get(full).or_else(|| {
        let (key, _) = node.wildcards.iter().find(|(_, parts)| wildcard_match(parts, full))?;
        node.children.get(key)
    })
}

/// Whether `value` matches a pattern split at each `*` (each `*` matches
/// any run of characters, the empty one included).
fn wildcard_match(parts: &[String], value: &str) -> bool {
    let [first, middle @ .., last] = parts else {
        return parts.first().is_some_and(|only| only == value);
    };
    if value.len() < first.len() + last.len() || !value.starts_with(first.as_str()) || !value.ends_with(last.as_str()) {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for part in middle {
        match rest.find(part.as_str()) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
domain: site
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 10 }
  - key: path
    value: /login
    rate_limit: { unit: second, requests_per_unit: 2 }
  - key: path
    value: /api/*
    rate_limit: { unit: second, requests_per_unit: 50, name: api }
  - key: plan
    descriptors:
      - key: customer
        rate_limit: { unit: hour, requests_per_unit: 1000 }
      - key: customer
        value: acme
        rate_limit: { unlimited: true }
"#;

    fn rule<'r>(rules: &'r Rules, entries: &[(&str, &str)]) -> Option<&'r str> {
        rules.matching("site", entries.iter().copied()).map(|r| r.path.as_str())
    }

    #[test]
    fn the_most_specific_rule_matches() {
        let rules = Rules::parse(YAML, "test.yaml").expect("parse");
        assert_eq!(rule(&rules, &[("remote_address", "192.0.2.1")]), Some("site.remote_address"));
        assert_eq!(rule(&rules, &[("path", "/login")]), Some("site.path_/login"));
        assert_eq!(rule(&rules, &[("path", "/api/users")]), Some("site.path_/api/*"));
        assert_eq!(rule(&rules, &[("path", "/other")]), None, "no default for `path`");
        assert_eq!(rule(&rules, &[("plan", "gold"), ("customer", "ada")]), Some("site.plan.customer"));
        assert_eq!(rule(&rules, &[("plan", "gold"), ("customer", "acme")]), Some("site.plan.customer_acme"));
        assert_eq!(rule(&rules, &[("plan", "gold")]), None, "a path shorter than the rule's");
        assert_eq!(rule(&rules, &[("remote_address", "x"), ("more", "y")]), None, "a path longer than the rule's");
        assert_eq!(rule(&rules, &[]), None);
        assert!(rules.matching("other", [("remote_address", "x")].into_iter()).is_none());
    }

    #[test]
    fn wildcards_match_as_envoys_do() {
        let parts = |p: &str| p.split('*').map(str::to_owned).collect::<Vec<_>>();
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/"));
        assert!(wildcard_match(&parts("path_/api/*"), "path_/api/x/y"));
        assert!(!wildcard_match(&parts("path_/api/*"), "path_/ap"));
        assert!(wildcard_match(&parts("k_a*b*c"), "k_aXbYc"));
        assert!(wildcard_match(&parts("k_a*b*c"), "k_abc"));
        assert!(!wildcard_match(&parts("k_a*b*c"), "k_ac"));
        assert!(!wildcard_match(&parts("k_ab*bc"), "k_abc"), "the two ends can't share a character");
        assert!(wildcard_match(&parts("k_exact"), "k_exact"));
    }
}
