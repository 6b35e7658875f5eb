//! The limits every app gets without configuring anything. Their budgets are
//! the table in the guide (`docs/guide/limits.md`); change them in code or in `limit-store.toml`.

use std::time::Duration;

use super::algorithm::Algorithm;
use super::limit::{Limit, Part, Policy};
use super::normalize::Normalize;

const MINUTE: Duration = Duration::from_secs(60);

/// Sign-in attempts: per account 5 per 15 minutes, then locked 15 minutes;
/// per IP 50 in any 15 minutes. Denies when the store is unavailable: an
/// uncounted sign-in is what a password-guessing attacker wants.
pub(crate) const SIGN_IN: &str = "sign-in";
/// Password-reset requests: per account 3 an hour, per IP 20 an hour. Allows
/// when the store is unavailable: a user locked out of recovery is worse than
/// a few extra reset emails to the account's own address.
pub(crate) const PASSWORD_RESET: &str = "password-reset";
/// Codes sent (email, SMS): per destination 5 an hour, at least 60 s apart.
/// Denies when the store is unavailable: each message costs money and
/// unlimited sends are how SMS-pumping fraud works.
pub(crate) const CODE_SENT: &str = "code-sent";
/// Guesses at one code: 5 per 15 minutes. Denies when the store is
/// unavailable: unlimited guesses make a short code guessable.
pub(crate) const CODE_VERIFY: &str = "code-verify";
/// API calls: per client 600 a minute, refilled evenly, bursts of up to 600
/// (GCRA). Allows when the store is unavailable: an outage of the store
/// should not become an outage of the API.
pub(crate) const API: &str = "api";

/// Every preset, in the order of the guide's table.
pub(crate) fn all() -> Vec<Limit> {
    vec![
        Limit::new(SIGN_IN)
            .part(Part::new("account", Algorithm::lockout(5, 15 * MINUTE, 15 * MINUTE)).normalized(Normalize::Folded))
            .part(Part::new("ip", Algorithm::sliding_window(50, 15 * MINUTE)).kept_on_reset().normalized(Normalize::Ip))
            .policy(Policy::Deny),
        Limit::new(PASSWORD_RESET)
            .part(Part::new("account", Algorithm::fixed_window(3, 60 * MINUTE)).normalized(Normalize::Folded))
            .part(Part::new("ip", Algorithm::fixed_window(20, 60 * MINUTE)).kept_on_reset().normalized(Normalize::Ip))
            .policy(Policy::Allow),
        Limit::new(CODE_SENT)
            .part(
                Part::new("destination", Algorithm::FixedWindow { budget: 5, window: 3_600_000, cooldown: 60_000 })
                    .normalized(Normalize::Folded),
            )
            .policy(Policy::Deny),
        Limit::new(CODE_VERIFY).part(Part::new("code", Algorithm::fixed_window(5, 15 * MINUTE))).policy(Policy::Deny),
        Limit::new(API).part(Part::new("client", Algorithm::gcra(600, MINUTE))).policy(Policy::Allow),
    ]
}

/// The preset named `name`.
pub fn named(name: &str) -> Option<Limit> {
    all().into_iter().find(|l| l.name == name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_preset_is_valid() {
        for limit in super::all() {
            assert_eq!(limit.problem(), None, "{}", limit.name);
        }
    }
}
