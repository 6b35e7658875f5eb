//! `[rate_limit.limits.NAME]`: changes to a preset, or a limit of the site's
//! own when NAME is no preset; per part `[rate_limit.limits.NAME.PART]`, and
//! per value `[rate_limit.limits.NAME.PART.overrides]`.
//!
//! ```toml
//! [rate_limit.limits.uploads]
//! parts = ["user", "ip"]        # required for a limit of your own, in order
//! algorithm = "fixed-window"    # or "sliding-window", "gcra", "lockout"
//! budget = 20                   # the first part's (user)
//! window = "1h"
//! policy = "allow"              # when the store is unavailable
//!
//! [rate_limit.limits.uploads.ip]
//! budget = 100                  # every other part sets its own budget
//! normalize = "ip"              # "exact" (the default), "folded" or "ip"
//!
//! [rate_limit.limits.uploads.user.overrides]
//! "big-co" = { budget = 500 }   # a value, as normalised: its own budget (and window)
//! ```

use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::parse::{in_order, Item, Parser};
use super::{ConfigError, OverrideSettings};
use crate::limits::{presets, Algorithm, Limit, Normalize, Part, Policy, ALGORITHM_NAMES};

const PRESET_KEYS: &str = "budget, window, policy, shadow, or a table named after one of its parts";
const PRESET_PART_KEYS: &str = "budget, window, overrides";
const SITE_KEYS: &str =
    "parts, algorithm, budget, window, lock, policy, shadow, or a table named after one of its parts";
const SITE_PART_KEYS: &str = "algorithm, budget, window, lock, normalize, overrides";

/// What a table sets for a part, or for a limit's first part.
#[derive(Default)]
struct Counting {
    algorithm: Option<(String, usize)>,
    budget: Option<u64>,
    window: Option<Duration>,
    lock: Option<(Duration, usize)>,
}

impl Parser<'_> {
    /// One `[rate_limit.limits.NAME]` table.
    pub(super) fn limit(&self, item: Item<'_, '_>) -> Result<LimitSettings, ConfigError> {
        let name = item.0.get_ref().as_ref();
        let path = format!("rate_limit.limits.{name}");
        let table = self.table(item, &path)?;
        match presets::named(name) {
            Some(preset) => self.preset(name, &path, table, &preset),
            None => self.site_limit(item, name, &path, table),
        }
    }

    fn policy(&self, field: Item<'_, '_>, path: &str) -> Result<Policy, ConfigError> {
        match self.string(field, path)? {
            "allow" => Ok(Policy::Allow),
            "deny" => Ok(Policy::Deny),
            other => Err(self.error(
                field.0.span().start,
                path,
                format!("`{other}` is not a policy: use \"allow\" or \"deny\""),
            )),
        }
    }

    fn preset(
        &self,
        name: &str,
        path: &str,
        table: &DeTable<'_>,
        preset: &Limit,
    ) -> Result<LimitSettings, ConfigError> {
        let mut settings = LimitSettings { name: name.to_owned(), ..LimitSettings::default() };
        let mut limit_level = PartSettings { name: preset.parts[0].name.clone(), ..PartSettings::default() };
        let mut parts = Vec::new();
        for field in in_order(table) {
            let key = field.0.get_ref().as_ref();
            let path = format!("{path}.{key}");
            match key {
                "budget" => limit_level.budget = Some(self.count(field, &path)?),
                "window" => limit_level.window = Some(self.window(field, &path)?),
                "shadow" => settings.shadow = Some(self.boolean(field, &path)?),
                "policy" => settings.policy = Some(self.policy(field, &path)?),
                "parts" | "algorithm" | "lock" => {
                    return Err(self.error(
                        field.0.span().start,
                        &path,
                        format!(
                            "`{name}` is a preset: its parts and algorithms are fixed (tune its budget, window, policy \
                             and shadow); give a limit of your own another name"
                        ),
                    ))
                }
                part if preset.part_named(part).is_some() => {
                    let mut part_settings = PartSettings { name: part.to_owned(), ..PartSettings::default() };
                    for f in in_order(self.table(field, &path)?) {
                        let key = f.0.get_ref().as_ref();
                        let path = format!("{path}.{key}");
                        match key {
                            "budget" => part_settings.budget = Some(self.count(f, &path)?),
                            "window" => part_settings.window = Some(self.window(f, &path)?),
                            "overrides" => {
                                let normalize = preset.part_named(part).map_or(Normalize::Exact, Part::normalize);
                                part_settings.overrides = self.overrides(f, &path, normalize)?;
                                if let Some(p) = preset.part_named(part) {
                                    self.check_overrides(p, &part_settings.overrides, f.0.span().start, &path)?;
                                }
                            }
                            _ => return Err(self.unknown(f, &path, PRESET_PART_KEYS)),
                        }
                    }
                    parts.push(part_settings);
                }
                _ => {
                    let expected = format!("{PRESET_KEYS} ({})", preset.part_names().join(", "));
                    return Err(self.unknown(field, &path, &expected));
                }
            }
        }
        // The limit-level budget and window go first, so a part's own table wins.
        if limit_level.budget.is_some() || limit_level.window.is_some() {
            settings.parts.push(limit_level);
        }
        settings.parts.extend(parts);
        Ok(settings)
    }

    /// A limit of the site's own: every part's algorithm, budget and window
    /// resolved here, so that a missing one is refused with its line.
    fn site_limit(
        &self,
        item: Item<'_, '_>,
        name: &str,
        path: &str,
        table: &DeTable<'_>,
    ) -> Result<LimitSettings, ConfigError> {
        let at = item.0.span().start;
        let Some(names_item) = table.iter().find(|(k, _)| k.get_ref().as_ref() == "parts") else {
            let known: Vec<String> = presets::all().into_iter().map(|l| l.name).collect();
            return Err(self.error(
                at,
                path,
                format!(
                    "no preset is named `{name}`, and a limit of your own needs its parts: add parts = [\"user\", \"ip\"] \
                     (the keys it counts per, in order); the presets are {}",
                    known.join(", ")
                ),
            ));
        };
        let names = self.part_names(names_item, &format!("{path}.parts"))?;
        let mut settings = LimitSettings { name: name.to_owned(), ..LimitSettings::default() };
        let mut level = Counting::default();
        let mut override_at = Vec::new();
        let mut own: Vec<(Counting, Normalize, usize)> =
            names.iter().map(|_| (Counting::default(), Normalize::Exact, at)).collect();
        for field in in_order(table) {
            let key = field.0.get_ref().as_ref();
            let path = format!("{path}.{key}");
            match key {
                "parts" => {}
                "shadow" => settings.shadow = Some(self.boolean(field, &path)?),
                "policy" => settings.policy = Some(self.policy(field, &path)?),
                "algorithm" | "budget" | "window" | "lock" => self.counting(field, &path, &mut level)?,
                part => {
                    let Some(i) = names.iter().position(|n| n == part) else {
                        let expected = format!("{SITE_KEYS} ({})", names.join(", "));
                        return Err(self.unknown(field, &path, &expected));
                    };
                    own[i].2 = field.0.span().start;
                    let mut overrides = None;
                    for f in in_order(self.table(field, &path)?) {
                        let key = f.0.get_ref().as_ref();
                        let path = format!("{path}.{key}");
                        match key {
                            "algorithm" | "budget" | "window" | "lock" => self.counting(f, &path, &mut own[i].0)?,
                            "normalize" => own[i].1 = self.normalize(f, &path)?,
                            "overrides" => overrides = Some(f),
                            _ => return Err(self.unknown(f, &path, SITE_PART_KEYS)),
                        }
                    }
                    // Read last: the part's normalisation checks the values.
                    if let Some(f) = overrides {
                        let path = format!("{path}.overrides");
                        let values = self.overrides(f, &path, own[i].1)?;
                        override_at.push((part.to_owned(), f.0.span().start, path));
                        settings.parts.push(PartSettings {
                            name: part.to_owned(),
                            overrides: values,
                            ..PartSettings::default()
                        });
                    }
                }
            }
        }
        let mut limit = Limit::new(name);
        for (i, (part, (counting, normalize, part_at))) in names.iter().zip(own).enumerate() {
            let algorithm = self.algorithm(name, part, i, &level, &counting, part_at)?;
            limit = limit.part(Part::new(part, algorithm).normalized(normalize));
        }
        if let Some(problem) = limit.problem() {
            return Err(self.error(at, path, format!("{problem}: change the table to fit")));
        }
        for (settings, (name, at, path)) in settings.parts.iter().zip(&override_at) {
            if let Some(part) = limit.part_named(name) {
                self.check_overrides(part, &settings.overrides, *at, path)?;
            }
        }
        settings.defines = Some(limit);
        Ok(settings)
    }

    /// `parts = ["user", "ip"]`: 1 to 32 names, none twice.
    fn part_names(&self, item: Item<'_, '_>, path: &str) -> Result<Vec<String>, ConfigError> {
        let at = item.0.span().start;
        let wrong = || {
            self.error(at, path, "expected a list of part names, as parts = [\"user\", \"ip\"] (at least one)".into())
        };
        let DeValue::Array(values) = item.1.get_ref() else { return Err(wrong()) };
        let mut names: Vec<String> = Vec::new();
        for value in values {
            let DeValue::String(name) = value.get_ref() else { return Err(wrong()) };
            if names.iter().any(|n| n == name.as_ref()) {
                return Err(self.error(at, path, format!("part `{name}` is listed twice: list each part once")));
            }
            if !crate::limits::valid_name(name) {
                return Err(self.error(
                    at,
                    path,
                    format!("part `{name}`: a part's name is 1 to 64 letters, digits, `-` or `_`: rename it"),
                ));
            }
            if matches!(name.as_ref(), "parts" | "algorithm" | "budget" | "window" | "lock" | "policy" | "shadow") {
                return Err(self.error(
                    at,
                    path,
                    format!("`{name}` names a setting of the limit, so it can't name a part: call the part otherwise"),
                ));
            }
            names.push(name.to_string());
        }
        if names.is_empty() {
            return Err(wrong());
        }
        Ok(names)
    }

    fn counting(&self, field: Item<'_, '_>, path: &str, into: &mut Counting) -> Result<(), ConfigError> {
        let at = field.0.span().start;
        match field.0.get_ref().as_ref() {
            "algorithm" => {
                let name = self.string(field, path)?;
                if !ALGORITHM_NAMES.contains(&name) {
                    return Err(self.error(
                        at,
                        path,
                        format!("`{name}` is not an algorithm: use one of \"{}\"", ALGORITHM_NAMES.join("\", \"")),
                    ));
                }
                into.algorithm = Some((name.to_owned(), at));
            }
            "budget" => into.budget = Some(self.count(field, path)?),
            "window" => into.window = Some(self.window(field, path)?),
            _ => into.lock = Some((self.duration(field, path, "a lock")?, at)),
        }
        Ok(())
    }

    fn normalize(&self, field: Item<'_, '_>, path: &str) -> Result<Normalize, ConfigError> {
        match self.string(field, path)? {
            "exact" => Ok(Normalize::Exact),
            "folded" => Ok(Normalize::Folded),
            "ip" => Ok(Normalize::Ip),
            other => Err(self.error(
                field.0.span().start,
                path,
                format!(
                    "`{other}` is not a normalisation: use \"exact\" (as given), \"folded\" (accounts, emails) or \"ip\" (client addresses)"
                ),
            )),
        }
    }

    /// Part `i`'s algorithm: its own settings, then the limit's (budget and
    /// window for the first part only; the window for every part).
    fn algorithm(
        &self,
        limit: &str,
        part: &str,
        i: usize,
        level: &Counting,
        own: &Counting,
        at: usize,
    ) -> Result<Algorithm, ConfigError> {
        let table = format!("rate_limit.limits.{limit}.{part}");
        let (name, name_at) = own
            .algorithm
            .clone()
            .or_else(|| level.algorithm.clone())
            .unwrap_or_else(|| ("fixed-window".to_owned(), at));
        let first = i == 0;
        let Some(budget) = own.budget.or(if first { level.budget } else { None }) else {
            let hint = if first {
                format!("set budget = n in [rate_limit.limits.{limit}] (or in [{table}])")
            } else {
                format!("set budget = n in [{table}] (the limit's own budget is its first part's)")
            };
            return Err(self.error(at, &format!("{table}.budget"), format!("part `{part}` has no budget: {hint}")));
        };
        let Some(window) = own.window.or(level.window) else {
            return Err(self.error(
                at,
                &format!("{table}.window"),
                format!(
                    "part `{part}` has no window: set window = \"1m\" in [rate_limit.limits.{limit}] or in [{table}]"
                ),
            ));
        };
        let lock = own.lock.or(level.lock);
        if let Some((_, lock_at)) = lock.filter(|_| name != "lockout") {
            return Err(self.error(
                lock_at,
                &format!("{table}.lock"),
                format!("`lock` is for the lockout algorithm, and part `{part}` counts by {name}: remove it or set algorithm = \"lockout\""),
            ));
        }
        let algorithm = Algorithm::named(&name, budget, window, lock.map_or(window, |(d, _)| d)).ok_or_else(|| {
            self.error(name_at, &format!("{table}.algorithm"), format!("`{name}` is not an algorithm"))
        })?;
        if let Some(problem) = algorithm.problem() {
            return Err(self.error(at, &table, format!("part `{part}`: {problem}")));
        }
        Ok(algorithm)
    }
}

/// Changes to one preset, or a limit of the site's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitSettings {
    /// The limit's name.
    pub(crate) name: String,
    /// A limit of the site's own (a name that is no preset): the limit its
    /// table defines, added to the builder before the changes.
    pub(crate) defines: Option<Limit>,
    /// What it answers when the store is unavailable.
    pub(crate) policy: Option<Policy>,
    /// Shadow mode.
    pub(crate) shadow: Option<bool>,
    /// Budgets and windows of its parts.
    pub(crate) parts: Vec<PartSettings>,
}

/// Changes to one part of a limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct PartSettings {
    /// The part's name.
    pub(crate) name: String,
    /// Its budget.
    pub(crate) budget: Option<u64>,
    /// Its window.
    pub(crate) window: Option<Duration>,
    /// `[rate_limit.limits.NAME.PART.overrides]`: values with budgets of their own.
    pub(crate) overrides: Vec<OverrideSettings>,
}

#[cfg(test)]
mod tests;
