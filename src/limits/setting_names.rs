//! The names of the algorithms and of the normalisations, as the settings
//! file takes them and `GET /v1/limits` shows them.

use std::time::Duration;

use super::algorithm::Algorithm;
use super::normalize::Normalize;

impl Normalize {
    /// `exact`, `folded` or `ip` (as it prints).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Normalize::Exact => "exact",
            Normalize::Folded => "folded",
            Normalize::Ip => "ip",
        }
    }
}

/// Prints `exact`, `folded` or `ip`, as the settings file takes it.
impl std::fmt::Display for Normalize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Prints the algorithm's name, `fixed-window`, `sliding-window`, `gcra` or
/// `lockout`, as the settings file takes it (`{:?}` shows its numbers).
impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Every algorithm's name, in the order the docs give them.
pub(crate) const ALGORITHM_NAMES: [&str; 4] = ["fixed-window", "sliding-window", "gcra", "lockout"];

impl Algorithm {
    /// `fixed-window`, `sliding-window`, `gcra` or `lockout` (as it prints).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Algorithm::FixedWindow { .. } => "fixed-window",
            Algorithm::SlidingWindow { .. } => "sliding-window",
            Algorithm::Gcra { .. } => "gcra",
            Algorithm::Lockout { .. } => "lockout",
        }
    }

    /// The algorithm named `name` (one of [`ALGORITHM_NAMES`]) with `budget`
    /// per `window`, and `lock` for a lockout; `None` for another name.
    pub(crate) fn named(name: &str, budget: u64, window: Duration, lock: Duration) -> Option<Self> {
        Some(match name {
            "fixed-window" => Algorithm::fixed_window(budget, window),
            "sliding-window" => Algorithm::sliding_window(budget, window),
            "gcra" => Algorithm::gcra(budget, window),
            "lockout" => Algorithm::lockout(budget, window, lock),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_makes_the_algorithm_of_that_name() {
        let minute = Duration::from_secs(60);
        for name in ALGORITHM_NAMES {
            assert_eq!(Algorithm::named(name, 3, minute, minute).map(|a| a.name()), Some(name));
        }
        assert_eq!(Algorithm::named("token-bucket", 3, minute, minute), None);
    }
}
