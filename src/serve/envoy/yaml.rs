//! Reads envoy's ratelimit service format into [`Rules`] ([`Rules::load`]: a
//! YAML file, or a directory of them), walking the parsed nodes with their lines, so that every refusal names
//! its file, line and key (`descriptors[0].rate_limit.unit`).
//!
//! Scalars are read as written (no YAML type guessing): a `value: 0123` is
//! the text `0123`, as envoy's own service reads it.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use saphyr::{LoadableYamlNode, MarkedYaml, ScalarStyle, YamlData, YamlLoader};
use saphyr_parser::Parser;

use super::rules::{Node, Rule, Rules, Unit};
use limit_store::config::ConfigError;

const ROOT_KEYS: &str = "domain, descriptors";
const DESCRIPTOR_KEYS: &str = "key, value, rate_limit, descriptors, shadow_mode, detailed_metric, value_to_metric";
const RATE_LIMIT_KEYS: &str = "unit, requests_per_unit, unlimited, name";
/// Keys of envoy's format that would change what is counted, which this
/// service does not do: refused rather than ignored.
const NOT_SUPPORTED: [&str; 4] = ["replaces", "quota_mode", "share_threshold", "metadata"];

impl Rules {
    /// Reads `path`: one YAML file, or every `*.yaml` and `*.yml` file of a
    /// directory (in name order). The first file that can't be used is
    /// refused with its line and key.
    pub fn load(path: &Path) -> Result<Rules, ConfigError> {
        let unreadable = |origin: &Path, e: std::io::Error| ConfigError {
            origin: origin.display().to_string(),
            line: None,
            key: None,
            message: format!("can't read it: {e}"),
        };
        let files = if path.is_dir() {
            let mut files: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| unreadable(path, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            files.sort();
            files
        } else {
            vec![path.to_owned()]
        };
        let mut rules = Rules::default();
        for file in files {
            let text = limit_store::config::read_file(&file)?;
            load(&mut rules, &text, &file.display().to_string())?;
        }
        Ok(rules)
    }

    /// Reads the text of one YAML file (`origin` names it in errors).
    #[cfg(test)]
    pub(crate) fn parse(text: &str, origin: &str) -> Result<Rules, ConfigError> {
        let mut rules = Rules::default();
        load(&mut rules, text, origin)?;
        Ok(rules)
    }
}

/// One item of a mapping: its key's text, the key node, and the value node.
type Item<'n, 'i> = (Cow<'n, str>, &'n MarkedYaml<'i>, &'n MarkedYaml<'i>);

/// Where the walk is: the file, and the key path to the node.
struct At<'a> {
    origin: &'a str,
}

impl At<'_> {
    fn error(&self, node: &MarkedYaml<'_>, key: &str, message: impl Into<String>) -> ConfigError {
        ConfigError {
            origin: self.origin.to_owned(),
            line: Some(node.span.start.line()),
            key: (!key.is_empty()).then(|| key.to_owned()),
            message: message.into(),
        }
    }

    /// The items of a mapping, as (key text, key node, value node).
    fn mapping<'n, 'i>(&self, node: &'n MarkedYaml<'i>, key: &str) -> Result<Vec<Item<'n, 'i>>, ConfigError> {
        let YamlData::Mapping(map) = &node.data else {
            return Err(self.error(node, key, format!("expected a mapping, found {}", kind(node))));
        };
        map.iter()
            .map(|(k, v)| match text(k) {
                Some(name) => Ok((name, k, v)),
                None => Err(self.error(k, key, "a key must be text")),
            })
            .collect()
    }

    fn string(&self, node: &MarkedYaml<'_>, key: &str) -> Result<Option<String>, ConfigError> {
        match &node.data {
            YamlData::Representation(raw, ScalarStyle::Plain, None) if is_null(raw) => Ok(None),
            YamlData::Representation(raw, _, _) => Ok(Some(raw.to_string())),
            _ => Err(self.error(node, key, format!("expected text, found {}", kind(node)))),
        }
    }

    fn boolean(&self, node: &MarkedYaml<'_>, key: &str) -> Result<bool, ConfigError> {
        match text(node).as_deref() {
            Some("true" | "True" | "TRUE") => Ok(true),
            Some("false" | "False" | "FALSE") => Ok(false),
            _ => Err(self.error(node, key, "expected true or false")),
        }
    }

    fn count(&self, node: &MarkedYaml<'_>, key: &str) -> Result<u32, ConfigError> {
        text(node)
            .and_then(|t| t.parse::<u32>().ok())
            .ok_or_else(|| self.error(node, key, format!("expected a whole number from 0 to {}", u32::MAX)))
    }

    fn sequence<'n, 'i>(&self, node: &'n MarkedYaml<'i>, key: &str) -> Result<&'n [MarkedYaml<'i>], ConfigError> {
        match &node.data {
            YamlData::Sequence(items) => Ok(items),
            YamlData::Representation(raw, ScalarStyle::Plain, None) if is_null(raw) => Ok(&[]),
            _ => Err(self.error(node, key, format!("expected a list, found {}", kind(node)))),
        }
    }
}

fn is_null(raw: &str) -> bool {
    matches!(raw, "" | "~" | "null" | "Null" | "NULL")
}

/// A scalar's text as written.
fn text<'n>(node: &'n MarkedYaml<'_>) -> Option<Cow<'n, str>> {
    match &node.data {
        YamlData::Representation(raw, _, _) => Some(Cow::Borrowed(raw.as_ref())),
        _ => None,
    }
}

fn kind(node: &MarkedYaml<'_>) -> &'static str {
    match &node.data {
        YamlData::Mapping(_) => "a mapping",
        YamlData::Sequence(_) => "a list",
        YamlData::Representation(..) | YamlData::Value(_) => "a scalar",
        _ => "something else",
    }
}

/// Adds the domain of the YAML `text` (from `origin`) to `rules`.
pub(super) fn load(rules: &mut Rules, text: &str, origin: &str) -> Result<(), ConfigError> {
    let at = At { origin };
    let mut loader = YamlLoader::<MarkedYaml>::default();
    loader.early_parse(false);
    let scanned = Parser::new_from_str(text).load(&mut loader, true);
    if let Some(e) = scanned.err().or_else(|| loader.error().cloned()) {
        return Err(ConfigError {
            origin: origin.to_owned(),
            line: Some(e.marker().line()),
            key: None,
            message: format!("not YAML: {}", e.info()),
        });
    }
    let docs = loader.into_documents();
    let root = match docs.as_slice() {
        [root] if root.is_mapping() => root,
        [other] => return Err(at.error(other, "", format!("expected a mapping with `domain`, found {}", kind(other)))),
        _ => {
            return Err(ConfigError {
                origin: origin.to_owned(),
                line: None,
                key: None,
                message: format!("expected one YAML document, found {}", docs.len()),
            })
        }
    };
    let (mut domain, mut descriptors) = (None, None);
    for (name, key_node, value) in at.mapping(root, "")? {
        match name.as_ref() {
            "domain" => domain = at.string(value, "domain")?.map(|d| (d, key_node)),
            "descriptors" => descriptors = Some(value),
            _ => return Err(at.error(key_node, &name, format!("unknown key; expected one of: {ROOT_KEYS}"))),
        }
    }
    let Some((domain, domain_node)) = domain.filter(|(d, _)| !d.is_empty()) else {
        return Err(at.error(root, "domain", "every file names its `domain`, the one envoy's filter sends"));
    };
    if rules.domains.contains_key(&domain) {
        return Err(at.error(domain_node, "domain", format!("domain `{domain}` is already defined by another file")));
    }
    let mut top = Node::default();
    if let Some(list) = descriptors {
        walk(&at, &mut top, list, "descriptors", &domain, &mut rules.count)?;
    }
    rules.domains.insert(domain, top);
    Ok(())
}

/// Reads the descriptors of `list` (at `key`) into `parent`'s children.
fn walk(
    at: &At<'_>,
    parent: &mut Node,
    list: &MarkedYaml<'_>,
    key: &str,
    path: &str,
    count: &mut usize,
) -> Result<(), ConfigError> {
    for (i, item) in at.sequence(list, key)?.iter().enumerate() {
        let here = format!("{key}[{i}]");
        let (mut name, mut value, mut rate_limit, mut nested, mut shadow) = (None, None, None, None, false);
        for (field, key_node, v) in at.mapping(item, &here)? {
            let full = format!("{here}.{field}");
            match field.as_ref() {
                "key" => name = at.string(v, &full)?,
                "value" => value = at.string(v, &full)?,
                "rate_limit" => rate_limit = Some((v, full)),
                "descriptors" => nested = Some((v, full)),
                "shadow_mode" => shadow = at.boolean(v, &full)?,
                // Metrics of envoy's own service: nothing to do here.
                "detailed_metric" | "value_to_metric" => drop(at.boolean(v, &full)?),
                f if NOT_SUPPORTED.contains(&f) => {
                    return Err(at.error(key_node, &full, "not supported by limit-store's Envoy service: remove it"))
                }
                _ => return Err(at.error(key_node, &full, format!("unknown key; expected one of: {DESCRIPTOR_KEYS}"))),
            }
        }
        let Some(name) = name.filter(|n| !n.is_empty()) else {
            return Err(at.error(item, &format!("{here}.key"), "every descriptor has a `key`"));
        };
        let entry = match value.filter(|v| !v.is_empty()) {
            Some(value) => format!("{name}_{value}"),
            None => name,
        };
        let path = format!("{path}.{entry}");
        if parent.children.contains_key(&entry) {
            return Err(at.error(item, &here, format!("`{path}` is defined twice")));
        }
        let mut node = Node::default();
        if let Some((v, full)) = rate_limit {
            node.rule = Some(Arc::new(rule(at, v, &full, &path, shadow)?));
            *count += 1;
        }
        if let Some((v, full)) = nested {
            walk(at, &mut node, v, &full, &path, count)?;
        }
        parent.insert(entry, node);
    }
    Ok(())
}

/// Reads a `rate_limit` mapping.
fn rule(at: &At<'_>, node: &MarkedYaml<'_>, key: &str, path: &str, shadow: bool) -> Result<Rule, ConfigError> {
    let (mut unit, mut per_unit, mut unlimited, mut name) = (None, None, false, None);
    for (field, key_node, v) in at.mapping(node, key)? {
        let full = format!("{key}.{field}");
        match field.as_ref() {
            "unit" => {
                let text = at.string(v, &full)?.unwrap_or_default();
                match Unit::named(&text) {
                    Some(u) => unit = Some((u, v, full)),
                    None => {
                        return Err(at.error(
                            v,
                            &full,
                            format!("unknown unit `{text}`; expected second, minute, hour, day, week, month or year"),
                        ))
                    }
                }
            }
            "requests_per_unit" => per_unit = Some(at.count(v, &full)?),
            "unlimited" => unlimited = at.boolean(v, &full)?,
            "name" => name = at.string(v, &full)?.filter(|n| !n.is_empty()),
            _ => return Err(at.error(key_node, &full, format!("unknown key; expected one of: {RATE_LIMIT_KEYS}"))),
        }
    }
    let unit = match (unit, unlimited) {
        (Some((_, v, full)), true) => {
            return Err(at.error(v, &full, "an unlimited rule takes no unit: remove one of the two"))
        }
        (Some((u, ..)), false) => u,
        (None, true) => Unit::Second,
        (None, false) => {
            return Err(at.error(node, &format!("{key}.unit"), "a rule needs its `unit` (or `unlimited: true`)"))
        }
    };
    let requests_per_unit = match (per_unit, unlimited) {
        (Some(n), _) => n,
        (None, true) => 0,
        (None, false) => {
            return Err(at.error(
                node,
                &format!("{key}.requests_per_unit"),
                "a rule needs its `requests_per_unit` (0 refuses every request)",
            ))
        }
    };
    Ok(Rule::new(path.to_owned(), name, requests_per_unit, unit, unlimited, shadow))
}

#[cfg(test)]
mod tests {
    use super::super::Rules;

    #[test]
    fn errors_name_their_line_and_key() {
        let cases: [(&str, usize, &str, &str); 8] = [
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute }\n",
                4,
                "descriptors[0].rate_limit.requests_per_unit",
                "requests_per_unit",
            ),
            ("domain: d\ndescriptors:\n  - key: a\n    colour: red\n", 4, "descriptors[0].colour", "unknown key"),
            ("domain: d\ndescriptors:\n  - value: x\n", 3, "descriptors[0].key", "every descriptor has a `key`"),
            ("domain: d\ndescriptors:\n  - key: a\n  - key: a\n", 4, "descriptors[1]", "`d.a` is defined twice"),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
                6,
                "descriptors[0].rate_limit.unit",
                "unlimited",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: hour\n      requests_per_unit: -1\n",
                6,
                "descriptors[0].rate_limit.requests_per_unit",
                "whole number",
            ),
            (
                "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        replaces: [x]\n",
                6,
                "descriptors[0].descriptors[0].replaces",
                "not supported",
            ),
            ("descriptors: []\n", 1, "domain", "`domain`"),
        ];
        for (yaml, line, key, words) in cases {
            let e = Rules::parse(yaml, "rules.yaml").expect_err(yaml);
            assert_eq!((e.line, e.key.as_deref()), (Some(line), Some(key)), "{yaml}: {e}");
            assert!(e.message.contains(words), "{yaml}: {e}");
            assert!(e.to_string().starts_with(&format!("rules.yaml line {line}, `{key}`")), "{e}");
        }
        let e = Rules::parse("domain: [unclosed\n", "rules.yaml").expect_err("not YAML");
        assert!(e.message.starts_with("not YAML") && e.line.is_some(), "{e}");
    }
}
