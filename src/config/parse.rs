//! Reads `limit-store.toml`: walks the parsed file in the order it was
//! written, keeping each key's full name and line for the errors.

use std::time::Duration;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::{Config, ConfigError, StoreKind, FILE};
use crate::secret::{SecretString, SecretUrl};

const RATE_LIMIT_KEYS: &str =
    "store, database_url, redis_url, redis_min_replicas_acked, table, single_instance, max_entries, durable_commits, secret, deadline, max_in_flight, ipv6_prefix, fold_case, limits, envoy_config";
const SERVE_KEYS: &str = "max_connections, request_timeout, shutdown_grace";

/// Walks the parsed file, keeping each key's full name and line for errors.
pub(super) struct Parser<'t> {
    text: &'t str,
}

pub(super) type Item<'a, 'i> = (&'a Spanned<std::borrow::Cow<'i, str>>, &'a Spanned<DeValue<'i>>);

/// A table's items in file order (the parsed map is sorted by key), so
/// settings apply, and errors are found, in the order they were written.
pub(super) fn in_order<'a, 'i>(table: &'a DeTable<'i>) -> Vec<Item<'a, 'i>> {
    let mut items: Vec<Item<'a, 'i>> = table.iter().collect();
    items.sort_by_key(|(key, _)| key.span().start);
    items
}

impl<'t> Parser<'t> {
    pub(super) fn new(text: &'t str) -> Self {
        Parser { text }
    }

    pub(super) fn line(&self, at: usize) -> usize {
        self.text[..at.min(self.text.len())].bytes().filter(|&b| b == b'\n').count() + 1
    }

    pub(super) fn error(&self, at: usize, key: &str, message: String) -> ConfigError {
        ConfigError { origin: FILE.to_owned(), line: Some(self.line(at)), key: Some(key.to_owned()), message }
    }

    pub(super) fn unknown(&self, (key, _): Item<'_, '_>, path: &str, expected: &str) -> ConfigError {
        self.error(key.span().start, path, format!("unknown key; expected one of: {expected}"))
    }

    pub(super) fn table<'a, 'i>(&self, (key, value): Item<'a, 'i>, path: &str) -> Result<&'a DeTable<'i>, ConfigError> {
        match value.get_ref() {
            DeValue::Table(table) => Ok(table),
            other => Err(self.error(key.span().start, path, format!("expected a table, found a {}", other.type_str()))),
        }
    }

    pub(super) fn string<'a>(&self, (key, value): Item<'a, '_>, path: &str) -> Result<&'a str, ConfigError> {
        match value.get_ref() {
            DeValue::String(s) => Ok(s),
            other => {
                Err(self.error(key.span().start, path, format!("expected a string, found a {}", other.type_str())))
            }
        }
    }

    pub(super) fn boolean(&self, (key, value): Item<'_, '_>, path: &str) -> Result<bool, ConfigError> {
        match value.get_ref() {
            DeValue::Boolean(b) => Ok(*b),
            other => {
                Err(self.error(key.span().start, path, format!("expected true or false, found a {}", other.type_str())))
            }
        }
    }

    pub(super) fn count(&self, (key, value): Item<'_, '_>, path: &str) -> Result<u64, ConfigError> {
        let n = match value.get_ref() {
            DeValue::Integer(i) => u64::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        };
        n.filter(|&n| n >= 1)
            .ok_or_else(|| self.error(key.span().start, path, "expected a whole number of at least 1".into()))
    }

    /// A number of replicas, 0 or more.
    fn replicas(&self, (key, value): Item<'_, '_>, path: &str) -> Result<u32, ConfigError> {
        let n = match value.get_ref() {
            DeValue::Integer(i) => u32::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        };
        n.ok_or_else(|| self.error(key.span().start, path, "expected a number of replicas, 0 or more".into()))
    }

    /// A network prefix length of IPv6, 0 to 128.
    fn prefix(&self, (key, value): Item<'_, '_>, path: &str) -> Result<u8, ConfigError> {
        let bits = match value.get_ref() {
            DeValue::Integer(i) => u8::from_str_radix(i.as_str(), i.radix()).ok(),
            _ => None,
        };
        bits.filter(|&b| b <= 128).ok_or_else(|| {
            self.error(key.span().start, path, "expected a prefix length from 0 to 128 (64 counts per /64)".into())
        })
    }

    /// A duration such as `"15m"`; `what` names it in the error.
    pub(super) fn duration(&self, item: Item<'_, '_>, path: &str, what: &str) -> Result<Duration, ConfigError> {
        let text = self.string(item, path)?;
        parse_duration(text).ok_or_else(|| {
            let hint = match number_and_unit(text) {
                None => "write a whole number and a unit, as",
                Some((0, _)) => "it must be longer than 0, as",
                Some(_) => "it is too long to count in milliseconds; write a shorter one, as",
            };
            self.error(
                item.0.span().start,
                path,
                format!("`{text}` is not {what}: {hint} \"500ms\", \"30s\", \"15m\", \"1h\" or \"1d\""),
            )
        })
    }

    pub(super) fn window(&self, item: Item<'_, '_>, path: &str) -> Result<Duration, ConfigError> {
        self.duration(item, path, "a window")
    }

    pub(super) fn config(&self) -> Result<Config, ConfigError> {
        let root = DeTable::parse(self.text).map_err(|e| ConfigError {
            origin: FILE.to_owned(),
            line: e.span().map(|s| self.line(s.start)),
            key: None,
            message: e.message().trim().to_owned(),
        })?;
        let mut config = Config::default();
        for item in in_order(root.get_ref()) {
            match item.0.get_ref().as_ref() {
                "rate_limit" => self.rate_limit(self.table(item, "rate_limit")?, &mut config)?,
                "serve" => self.serve(self.table(item, "serve")?, &mut config)?,
                other => return Err(self.unknown(item, other, "rate_limit, serve")),
            }
        }
        Ok(config)
    }

    fn rate_limit(&self, table: &DeTable<'_>, config: &mut Config) -> Result<(), ConfigError> {
        for item in in_order(table) {
            let name = item.0.get_ref().as_ref();
            let path = format!("rate_limit.{name}");
            match name {
                "store" => {
                    config.store = match self.string(item, &path)? {
                        "memory" => StoreKind::Memory,
                        "database" => StoreKind::Database,
                        "redis" => StoreKind::Redis,
                        other => {
                            return Err(self.error(
                                item.0.span().start,
                                &path,
                                format!("`{other}` is not a store: use \"memory\", \"database\" or \"redis\" (an app's own store is set in code)"),
                            ))
                        }
                    }
                }
                "database_url" => config.database_url = SecretUrl::from(self.string(item, &path)?),
                "redis_url" => config.redis_url = Some(SecretUrl::from(self.string(item, &path)?)),
                "redis_min_replicas_acked" => config.redis_min_replicas_acked = self.replicas(item, &path)?,
                "table" => config.table = Some(self.string(item, &path)?.to_owned()),
                "single_instance" => config.single_instance = self.boolean(item, &path)?,
                "max_entries" => config.max_entries = Some(self.count(item, &path)?),
                "durable_commits" => config.durable_commits = self.boolean(item, &path)?,
                "secret" => config.secret = Some(SecretString::from(self.string(item, &path)?)),
                "deadline" => config.deadline = Some(self.duration(item, &path, "a deadline")?),
                "max_in_flight" => config.max_in_flight = Some(self.count(item, &path)?),
                "ipv6_prefix" => config.ipv6_prefix = Some(self.prefix(item, &path)?),
                "fold_case" => config.fold_case = Some(self.boolean(item, &path)?),
                "envoy_config" => config.envoy_config = Some(self.string(item, &path)?.into()),
                "limits" => {
                    for limit in in_order(self.table(item, &path)?) {
                        let settings = self.limit(limit)?;
                        config.limits.push(settings);
                    }
                }
                _ => return Err(self.unknown(item, &path, RATE_LIMIT_KEYS)),
            }
        }
        Ok(())
    }

    fn serve(&self, table: &DeTable<'_>, config: &mut Config) -> Result<(), ConfigError> {
        for item in in_order(table) {
            let name = item.0.get_ref().as_ref();
            let path = format!("serve.{name}");
            match name {
                "max_connections" => {
                    config.serve.max_connections = usize::try_from(self.count(item, &path)?).unwrap_or(usize::MAX)
                }
                "request_timeout" => config.serve.request_timeout = self.duration(item, &path, "a timeout")?,
                "shutdown_grace" => config.serve.shutdown_grace = self.duration(item, &path, "a grace")?,
                _ => return Err(self.unknown(item, &path, SERVE_KEYS)),
            }
        }
        Ok(())
    }
}

/// `"500ms"`, `"30s"`, `"15m"`, `"1h"`, `"1d"`: a whole number and a unit,
/// longer than 0.
pub(super) fn parse_duration(text: &str) -> Option<Duration> {
    let (n, ms) = number_and_unit(text)?;
    n.checked_mul(ms).filter(|&ms| ms > 0).map(Duration::from_millis)
}

/// The number of a duration's text and its unit in milliseconds.
fn number_and_unit(text: &str) -> Option<(u64, u64)> {
    let digits = text.find(|c: char| !c.is_ascii_digit())?;
    let (number, unit) = text.split_at(digits);
    let n: u64 = number.parse().ok()?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some((n, ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        for bad in ["", "15", "m", "0s", "1.5h", "15 m", "-1s", "1w"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
