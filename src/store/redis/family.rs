//! Families of keys on Redis: each family (a limit: the key's text before its
//! first `:`, see `bound/family.rs`) holds a share of the bound, so that a
//! flood of new keys in one limit leaves the others counting.
//!
//! Keys stay hashed. Each stored key carries a **family tag**, 16 bits of
//! HMAC-SHA-256 of its family's text under the site secret:
//! `<prefix>:<generation>:<tag>:<hmac>`. The tag is a function of the secret
//! and the key alone, so every instance names a key the same way, and it
//! tells nothing of the family to whoever reads the server without the secret.
//! The bound's count (`SCAN`, see `chores.rs`) reads the tag of every key it
//! walks and counts each family's entries as well as the whole: after each
//! count, every family this instance has met is judged on the entries of
//! every instance, as the memory store judges its own.
//!
//! Between counts an instance adds its own new entries to its families'
//! counts as it writes them. A family it has not met yet (no key of it counted
//! or read here) is learned at its first key, and judged on the whole store's
//! entries from the next count on (at most 5 s near full).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use crate::bound::{Bound, FamilyId, Short, FAMILIES};
use crate::keys::Secret;

/// A family's tag in its keys' names.
pub(super) type Tag = u16;

/// The tags of the families this instance has met, both ways, and the new
/// entries it wrote per family (for a count that runs meanwhile).
#[derive(Debug)]
pub(super) struct FamilyTags {
    /// By family id: the tag of a named family (one text per id).
    by_id: Box<[OnceLock<Tag>]>,
    /// Tag to family, for the count; at most one entry per tag.
    by_tag: Mutex<HashMap<Tag, FamilyId>>,
    /// New entries written per family since the store was made.
    written: Box<[AtomicU64]>,
}

impl FamilyTags {
    pub(super) fn new() -> Self {
        FamilyTags {
            by_id: (0..FAMILIES).map(|_| OnceLock::new()).collect(),
            by_tag: Mutex::new(HashMap::new()),
            written: (0..FAMILIES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The family of `key` in `bound`, and its tag under `secret`.
    pub(super) fn of(&self, bound: &Bound, secret: &Secret, key: &str) -> (FamilyId, Tag) {
        let family = bound.family(key.as_bytes(), b"");
        let text = key.split_once(':').map(|(family, _)| family);
        if family == FamilyId::OTHER {
            // Many texts share this id: no tag to remember per id.
            let tag = tag_of(secret, text);
            self.by_tag.lock().entry(tag).or_insert(family);
            return (family, tag);
        }
        let tag = *self.by_id[family.index()].get_or_init(|| {
            let tag = tag_of(secret, text);
            self.by_tag.lock().insert(tag, family);
            tag
        });
        (family, tag)
    }

    /// A snapshot of what each family wrote so far, for [`Self::attribute`].
    pub(super) fn written(&self) -> Vec<u64> {
        self.written.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// Notes a new entry of `family` written.
    fn wrote(&self, family: FamilyId) {
        self.written[family.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Sets each known family's count in `bound` from `by_tag` (entries per
    /// tag, counted), plus what the family wrote since `since` (the snapshot
    /// taken when the count began): the count may have missed those.
    pub(super) fn attribute(&self, bound: &Bound, by_tag: &HashMap<Tag, u64>, since: &[u64]) {
        let mut counted = vec![0u64; FAMILIES];
        for (tag, family) in self.by_tag.lock().iter() {
            counted[family.index()] += by_tag.get(tag).copied().unwrap_or(0);
        }
        for (i, (now, then)) in self.written().iter().zip(since).enumerate() {
            bound.refresh_family(FamilyId::from_index(i), counted[i] + now.saturating_sub(*then));
        }
    }
}

/// The tag of the family `text` (`None`: a key without `:`).
fn tag_of(secret: &Secret, text: Option<&str>) -> Tag {
    let hash = match text {
        Some(text) => secret.key_hash(&format!("\0family\0{text}")),
        None => secret.key_hash("\0family without a colon"),
    };
    Tag::from_be_bytes([hash[0], hash[1]])
}

/// Appends the name part of `tag` (four hex digits and a `:`) to `out`.
pub(super) fn push_tag(out: &mut String, tag: Tag) {
    crate::keys::push_hex(out, &tag.to_be_bytes());
    out.push(':');
}

/// The tag in a stored key's name after `names`, if it has one.
pub(super) fn tag_in(name: &[u8], names: &str) -> Option<Tag> {
    let rest = name.strip_prefix(names.as_bytes())?;
    let hex = std::str::from_utf8(rest.get(..4)?).ok()?;
    (rest.get(4) == Some(&b':')).then(|| Tag::from_str_radix(hex, 16).ok()).flatten()
}

/// The room one update holds in the bound, per family, across its attempts
/// (only the last run of `apply` counts). Dropped before
/// [`FamilyAdmission::commit`], it gives its room back.
pub(super) struct FamilyAdmission<'a> {
    bound: &'a Bound,
    tags: &'a FamilyTags,
    held: Vec<FamilyId>,
    removed: Vec<FamilyId>,
}

impl<'a> FamilyAdmission<'a> {
    pub(super) fn new(bound: &'a Bound, tags: &'a FamilyTags) -> Self {
        FamilyAdmission { bound, tags, held: Vec::new(), removed: Vec::new() }
    }

    /// Holds room for one new entry of each of `added` (instead of what an
    /// earlier attempt held), and notes `removed` to give back once written.
    /// Nothing is held when the bound or a family's share has no room.
    pub(super) fn hold(&mut self, added: Vec<FamilyId>, removed: Vec<FamilyId>) -> Result<(), Short> {
        if added == self.held {
            self.removed = removed;
            return Ok(());
        }
        self.give_back();
        for (i, &family) in added.iter().enumerate() {
            if let Err(short) = self.bound.try_reserve_in(family, 1) {
                for &taken in &added[..i] {
                    self.bound.release_in(taken, 1);
                }
                return Err(short);
            }
        }
        self.held = added;
        self.removed = removed;
        Ok(())
    }

    /// The update was written: its new entries stay counted, its removed
    /// ones are given back.
    pub(super) fn commit(mut self) {
        for family in std::mem::take(&mut self.held) {
            self.tags.wrote(family);
        }
        for &family in &self.removed {
            self.bound.release_in(family, 1);
        }
    }

    fn give_back(&mut self) {
        for family in self.held.drain(..) {
            self.bound.release_in(family, 1);
        }
    }
}

impl Drop for FamilyAdmission<'_> {
    fn drop(&mut self) {
        self.give_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_read_back_from_a_name() {
        let mut name = String::from("p:1f:");
        push_tag(&mut name, 0xab01);
        name.push_str("cafe");
        assert_eq!(name, "p:1f:ab01:cafe");
        assert_eq!(tag_in(name.as_bytes(), "p:1f:"), Some(0xab01));
        assert_eq!(tag_in(b"p:1f:cafe", "p:1f:"), None, "a name without a tag");
        assert_eq!(tag_in(b"q:1f:ab01:cafe", "p:1f:"), None);
    }

    #[test]
    fn the_tag_depends_on_the_family_and_the_secret_only() {
        let secret = Secret::new(&"s".repeat(40)).unwrap();
        let (one, two) = (Bound::new(100, 0), Bound::new(100, 0));
        let (a, b) = (FamilyTags::new(), FamilyTags::new());
        // Another instance names its families in another order.
        let _ = b.of(&two, &secret, "first:x");
        let (_, api) = a.of(&one, &secret, "api:client:1");
        assert_eq!(b.of(&two, &secret, "api:client:2").1, api);
        assert_ne!(a.of(&one, &secret, "sign-in:ip:1").1, api);
        let other = Secret::new(&"t".repeat(40)).unwrap();
        assert_ne!(FamilyTags::new().of(&Bound::new(100, 0), &other, "api:client:1").1, api);
    }
}
