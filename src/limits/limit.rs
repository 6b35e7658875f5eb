//! What a limit is: a name, the parts it counts per, an algorithm and budget
//! for each part, a policy for when the store is unavailable, and whether it
//! only watches (shadow mode).

use std::time::Duration;

use super::algorithm::{millis, Algorithm};
use super::normalize::Normalize;
use crate::Millis;

/// What a limit answers when its store is unavailable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Let the attempt through, uncounted (for limits whose refusal would
    /// take the site down with the store: API calls).
    Allow,
    /// Refuse the attempt (for limits that stand between an attacker and an
    /// account: sign-in, code guesses).
    Deny,
}

impl Policy {
    /// `"allow"` or `"deny"`, as in logs and configuration (as it prints).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Policy::Allow => "allow",
            Policy::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One counter of a limit: the attempts of one kind of key (an account, an IP).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    pub(crate) name: String,
    pub(crate) algorithm: Algorithm,
    pub(crate) resets: bool,
    pub(crate) normalize: Normalize,
    /// Values with a budget of their own (see
    /// [`LimitsBuilder::value_override`](super::LimitsBuilder::value_override)).
    pub(crate) overrides: Vec<ValueOverride>,
}

impl Part {
    /// A part named `name` (letters, digits, `-`, `_`), counted by `algorithm`.
    pub fn new(name: &str, algorithm: Algorithm) -> Self {
        Part { name: name.to_owned(), algorithm, resets: true, normalize: Normalize::Exact, overrides: Vec::new() }
    }

    /// Makes values one before they are counted: [`Normalize::Folded`] for an
    /// account or a mailbox, [`Normalize::Ip`] for a client address (counted
    /// exactly by default).
    pub fn normalized(mut self, normalize: Normalize) -> Self {
        self.normalize = normalize;
        self
    }

    /// How the part makes its values one.
    pub fn normalize(&self) -> Normalize {
        self.normalize
    }

    /// Keeps this part's count when the limit is reset: a successful sign-in
    /// clears the account's failures, not the IP's, or one valid account would
    /// let an attacker clear an IP's budget at will.
    pub fn kept_on_reset(mut self) -> Self {
        self.resets = false;
        self
    }

    /// The part's name, as passed to [`Limits::attempt`](crate::Limits::attempt).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the part counts.
    pub fn algorithm(&self) -> &Algorithm {
        &self.algorithm
    }

    /// True when [`Limits::reset`](crate::Limits::reset) clears this part:
    /// unless it was [`kept_on_reset`](Self::kept_on_reset).
    pub fn cleared_by_reset(&self) -> bool {
        self.resets
    }
}

/// A limit: attempts counted per each of its parts, allowed only while every
/// part has budget left.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    pub(crate) name: String,
    pub(crate) parts: Vec<Part>,
    pub(crate) policy: Policy,
    pub(crate) shadow: bool,
}

impl Limit {
    /// A limit named `name` with no parts yet, denying when the store is unavailable.
    pub fn new(name: &str) -> Self {
        Limit { name: name.to_owned(), parts: Vec::new(), policy: Policy::Deny, shadow: false }
    }

    /// Adds a part.
    pub fn part(mut self, part: Part) -> Self {
        self.parts.push(part);
        self
    }

    /// Sets what the limit answers when its store is unavailable.
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// Shadow mode: count and log what the limit would refuse, refuse nothing.
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = shadow;
        self
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The limit's parts, in the order their keys are counted.
    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The part named `name`, if the limit has one.
    pub(crate) fn part_named(&self, name: &str) -> Option<&Part> {
        self.parts.iter().find(|p| p.name == name)
    }

    pub(crate) fn part_named_mut(&mut self, name: &str) -> Option<&mut Part> {
        self.parts.iter_mut().find(|p| p.name == name)
    }

    /// The limit's policy for an unavailable store.
    pub fn unavailable_policy(&self) -> Policy {
        self.policy
    }

    /// True in shadow mode.
    pub fn is_shadow(&self) -> bool {
        self.shadow
    }

    /// The names of the parts, for error messages.
    pub(crate) fn part_names(&self) -> Vec<String> {
        self.parts.iter().map(|p| p.name.clone()).collect()
    }

    /// Why this limit can't be used, if it can't.
    pub(crate) fn problem(&self) -> Option<String> {
        if !valid_name(&self.name) {
            return Some("a limit's name is 1 to 64 letters, digits, `-` or `_` (it starts every key)".into());
        }
        if self.parts.is_empty() || self.parts.len() > crate::MAX_KEYS {
            return Some(format!("a limit has 1 to {} parts (it has {})", crate::MAX_KEYS, self.parts.len()));
        }
        for (i, part) in self.parts.iter().enumerate() {
            if !valid_name(&part.name) {
                return Some(format!("part `{}`: a part's name is 1 to 64 letters, digits, `-` or `_`", part.name));
            }
            if self.parts[..i].iter().any(|p| p.name == part.name) {
                return Some(format!("part `{}` appears twice", part.name));
            }
            if let Some(problem) = part.algorithm.problem() {
                return Some(format!("part `{}`: {problem}", part.name));
            }
        }
        None
    }
}

/// Whether `name` can name a limit or a part: 1 to 64 letters, digits, `-`
/// or `_`, since it goes into every key of the limit.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// One value's own budget, and window (the part's when `None`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ValueOverride {
    pub(crate) value: String,
    pub(crate) budget: u64,
    pub(crate) window: Option<Millis>,
}

impl Part {
    /// Gives `value` its own `budget` per `window`: what
    /// [`LimitsBuilder::value_override`](super::LimitsBuilder::value_override)
    /// does to a part, for the settings' checks and tests.
    pub(crate) fn with_override(mut self, value: &str, budget: u64, window: Option<Duration>) -> Self {
        self.set_override(value, budget, window.map(millis));
        self
    }

    pub(crate) fn set_override(&mut self, value: &str, budget: u64, window: Option<Millis>) {
        self.overrides.retain(|o| o.value != value);
        self.overrides.push(ValueOverride { value: value.to_owned(), budget, window });
    }

    /// The algorithm of each value with a budget of its own, by value as given.
    pub fn overrides(&self) -> impl Iterator<Item = (&str, Algorithm)> {
        self.overrides.iter().map(|o| (o.value.as_str(), self.overridden(o)))
    }

    pub(super) fn overridden(&self, o: &ValueOverride) -> Algorithm {
        let mut algorithm = self.algorithm.clone();
        algorithm.set_budget(o.budget);
        if let Some(window) = o.window {
            algorithm.set_window(window);
        }
        algorithm
    }
}
