//! Part names as `&'static str`, so that a [`Decision`](super::Decision)
//! names its part without copying it: each distinct name is kept once for
//! the life of the process, whatever the number of limits built with it.
//! Names come from the code and the config, never from requests, so the
//! set stays as small as the config.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

/// The one `'static` copy of `name`.
pub(super) fn interned(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Mutex::default).lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&kept) = names.get(name) {
        return kept;
    }
    let kept: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(kept);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_kept_once() {
        let a = interned("account-name-test");
        let b = interned(&String::from("account-name-test"));
        assert_eq!(a, "account-name-test");
        assert!(std::ptr::eq(a, b), "the second asks gets the first copy");
        assert!(!std::ptr::eq(a, interned("ip-name-test")));
    }
}
