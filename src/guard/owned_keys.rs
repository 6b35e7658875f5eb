//! [`OwnedKeys`]: a call's keys in one allocation, for work that may outlive its caller.

use smallvec::SmallVec;

/// A call's keys, owned by the call so that it can outlive the caller: one
/// allocation for all of them.
pub(super) struct OwnedKeys {
    text: String,
    ends: SmallVec<[usize; 4]>,
}

impl OwnedKeys {
    pub(super) fn new(keys: &[&str]) -> Self {
        let mut text = String::with_capacity(keys.iter().map(|k| k.len()).sum());
        let mut ends = SmallVec::with_capacity(keys.len());
        for key in keys {
            text.push_str(key);
            ends.push(text.len());
        }
        OwnedKeys { text, ends }
    }

    pub(super) fn refs(&self) -> SmallVec<[&str; 4]> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.text[start..end];
                start = end;
                key
            })
            .collect()
    }
}
