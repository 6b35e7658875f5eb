//! [`ByName`]: the limits of an app by name. An app has a few (the presets
//! and some of its own), and a scan of a few names, which compares lengths
//! before bytes, beats hashing the name on every attempt; past
//! [`SCAN_UP_TO`] a hash map finds them.

/// The most names found by a scan.
const SCAN_UP_TO: usize = 16;

/// Values by name, in the order given.
pub(super) struct ByName<T> {
    entries: Box<[(Box<str>, T)]>,
    /// Where each name is, when there are too many to scan.
    index: Option<hashbrown::HashMap<Box<str>, usize>>,
}

impl<T> ByName<T> {
    /// The values by their names; a name given twice keeps its last value.
    pub(super) fn new(given: impl IntoIterator<Item = (String, T)>) -> Self {
        let mut entries: Vec<(Box<str>, T)> = Vec::new();
        for (name, value) in given {
            match entries.iter_mut().find(|(n, _)| **n == *name) {
                Some(entry) => entry.1 = value,
                None => entries.push((name.into_boxed_str(), value)),
            }
        }
        let index = (entries.len() > SCAN_UP_TO)
            .then(|| entries.iter().enumerate().map(|(i, (name, _))| (name.clone(), i)).collect());
        ByName { entries: entries.into_boxed_slice(), index }
    }

    /// The value named `name`.
    pub(super) fn get(&self, name: &str) -> Option<&T> {
        self.position(name).map(|i| &self.entries[i].1)
    }

    /// Where the value named `name` is, for [`at`](Self::at).
    pub(super) fn position(&self, name: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(name).copied(),
            None => self.entries.iter().position(|(n, _)| **n == *name),
        }
    }

    /// The value at `i`, as [`position`](Self::position) gave it.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(super) fn at(&self, i: usize) -> Option<&T> {
        self.entries.get(i).map(|(_, value)| value)
    }

    /// Every value, in the order given.
    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, value)| value)
    }

    /// Every name, in the order given.
    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| &**name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_name_scanned_or_hashed() {
        for count in [0, 1, SCAN_UP_TO, SCAN_UP_TO + 1, 100] {
            let names: Vec<String> = (0..count).map(|i| format!("limit-{i}")).collect();
            let by_name = ByName::new(names.iter().cloned().zip(0..));
            assert_eq!(by_name.index.is_some(), count > SCAN_UP_TO);
            for (i, name) in names.iter().enumerate() {
                assert_eq!(by_name.get(name), Some(&i), "{name} of {count}");
                assert_eq!(by_name.position(name).and_then(|at| by_name.at(at)), Some(&i));
            }
            assert_eq!(by_name.get("limit-"), None);
            assert_eq!(by_name.get(&format!("limit-{count}")), None);
            assert_eq!(by_name.names().count(), count);
            assert_eq!(by_name.values().sum::<usize>(), (0..count).sum::<usize>());
        }
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value() {
        let by_name = ByName::new([("api".to_owned(), 1), ("sign-in".to_owned(), 2), ("api".to_owned(), 3)]);
        assert_eq!(by_name.get("api"), Some(&3));
        assert_eq!(by_name.names().collect::<Vec<_>>(), ["api", "sign-in"]);
    }
}
