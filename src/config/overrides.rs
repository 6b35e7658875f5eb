//! `[rate_limit.limits.NAME.PART.overrides]`: values with budgets of their
//! own, `"value" = { budget = n, window = "1m" }`, checked where the file
//! gives them.

use std::time::Duration;

use super::parse::{in_order, Item, Parser};
use super::ConfigError;
use crate::limits::{Normalize, Part};

/// One value's own budget, from `"value" = { budget = n, window = "1m" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OverrideSettings {
    /// The value, as its part normalises it.
    pub(crate) value: String,
    /// Its budget.
    pub(crate) budget: u64,
    /// Its window (the part's when `None`).
    pub(crate) window: Option<Duration>,
}

impl Parser<'_> {
    /// Each override's algorithm (the part's, with the value's budget and
    /// window) can count.
    pub(super) fn check_overrides(
        &self,
        part: &Part,
        overrides: &[OverrideSettings],
        at: usize,
        path: &str,
    ) -> Result<(), ConfigError> {
        let mut with = part.clone();
        for o in overrides {
            with = with.with_override(&o.value, o.budget, o.window);
        }
        for (value, algorithm) in with.overrides() {
            if let Some(problem) = algorithm.problem() {
                return Err(self.error(
                    at,
                    &format!("{path}.\"{value}\""),
                    format!("the override of `{value}`: {problem}"),
                ));
            }
        }
        Ok(())
    }

    /// `overrides = { "value" = { budget = n, window = "1m" } }`.
    pub(super) fn overrides(
        &self,
        item: Item<'_, '_>,
        path: &str,
        normalize: Normalize,
    ) -> Result<Vec<OverrideSettings>, ConfigError> {
        let mut overrides = Vec::new();
        for value_item in in_order(self.table(item, path)?) {
            let value = value_item.0.get_ref().as_ref();
            let path = format!("{path}.\"{value}\"");
            let at = value_item.0.span().start;
            if normalize == Normalize::Ip && value.trim().parse::<std::net::IpAddr>().is_err() {
                return Err(self.error(
                    at,
                    &path,
                    format!("`{value}` is not an IP address, and this part counts addresses: write one as 192.0.2.7, or 2001:db8:: for its IPv6 network"),
                ));
            }
            let (mut budget, mut window) = (None, None);
            for f in in_order(self.table(value_item, &path)?) {
                let key = f.0.get_ref().as_ref();
                let path = format!("{path}.{key}");
                match key {
                    "budget" => budget = Some(self.count(f, &path)?),
                    "window" => window = Some(self.window(f, &path)?),
                    _ => return Err(self.unknown(f, &path, "budget, window")),
                }
            }
            let Some(budget) = budget else {
                return Err(self.error(
                    at,
                    &path,
                    format!("the override of `{value}` has no budget: write \"{value}\" = {{ budget = 1000, window = \"1m\" }} (window is optional)"),
                ));
            };
            overrides.push(OverrideSettings { value: value.to_owned(), budget, window });
        }
        Ok(overrides)
    }
}
