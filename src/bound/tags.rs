//! Families of keys in a shared store (Redis, a database): each stored entry
//! carries its family's **tag**, 16 bits of HMAC-SHA-256 of the family's text
//! (see `family.rs`) under the site secret. The tag is a function of the
//! secret and the key alone, so every instance tags a key the same way, and it
//! tells nothing of the family to whoever reads the store without the secret.
//!
//! A store's count for the bound reads the tag of every entry and counts each
//! family's entries as well as the whole: after each count, every family this
//! instance has met is judged on the entries of every instance, as the memory
//! store judges its own. Between counts an instance adds its own new entries
//! to its families' counts as it writes them. A family it has not met yet (no
//! key of it counted or read here) is learned at its first key, and judged on
//! the whole store's entries from the next count on.

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

use super::{Bound, FamilyId, Short, FAMILIES};
use crate::key_hash::Secret;

/// A family's tag, as stored beside its entries.
pub(crate) type Tag = u16;

/// The tags of the families this instance has met, both ways, and the new
/// entries it wrote per family (for a count that runs meanwhile).
#[derive(Debug)]
pub(crate) struct FamilyTags {
    /// By family id: the tag of a named family (one text per id).
    by_id: Box<[OnceLock<Tag>]>,
    /// Tag to family, for the count; at most one entry per tag.
    by_tag: Mutex<HashMap<Tag, FamilyId>>,
    /// New entries written per family since the store was made.
    written: Box<[AtomicU64]>,
}

impl FamilyTags {
    pub(crate) fn new() -> Self {
        FamilyTags {
            by_id: (0..FAMILIES).map(|_| OnceLock::new()).collect(),
            by_tag: Mutex::new(HashMap::new()),
            written: (0..FAMILIES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The family of `key` in `bound`, and its tag under `secret`.
    pub(crate) fn of(&self, bound: &Bound, secret: &Secret, key: &str) -> (FamilyId, Tag) {
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
    pub(crate) fn written(&self) -> Vec<u64> {
        self.written.iter().map(|n| n.load(Ordering::Relaxed)).collect()
    }

    /// Notes a new entry of `family` written.
    fn wrote(&self, family: FamilyId) {
        self.written[family.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// Sets each known family's count in `bound` from `by_tag` (entries per
    /// tag, counted), plus what the family wrote since `since` (the snapshot
    /// taken when the count began): the count may have missed those.
    pub(crate) fn attribute(&self, bound: &Bound, by_tag: &HashMap<Tag, u64>, since: &[u64]) {
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

/// The room one update holds in a shared store's bound, per family, across
/// its attempts: `apply` may run more than once (a conditional write that
/// missed, a retried deadlock), and only the last run's entries count.
/// Dropped before [`FamilyAdmission::commit`] (the update failed, or its
/// future was dropped), it gives its room back. The bound and the tags are
/// borrowed, or held by a store's shared part when the admission goes with
/// an update run elsewhere.
#[derive(Debug)]
pub(crate) struct FamilyAdmission<B: Deref<Target = Bound>, T: Deref<Target = FamilyTags>> {
    bound: B,
    tags: T,
    held: Vec<FamilyId>,
    removed: Vec<FamilyId>,
    /// Why the last hold found no room, if it did not.
    short: Option<Short>,
}

impl<B: Deref<Target = Bound>, T: Deref<Target = FamilyTags>> FamilyAdmission<B, T> {
    pub(crate) fn new(bound: B, tags: T) -> Self {
        FamilyAdmission { bound, tags, held: Vec::new(), removed: Vec::new(), short: None }
    }

    /// Holds room for one new entry of each of `added` (instead of what an
    /// earlier attempt held), and notes `removed` to give back once written.
    /// Nothing is held when the bound or a family's share has no room.
    pub(crate) fn hold(&mut self, added: Vec<FamilyId>, removed: Vec<FamilyId>) -> Result<(), Short> {
        self.short = None;
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
                self.short = Some(short);
                return Err(short);
            }
        }
        self.held = added;
        self.removed = removed;
        Ok(())
    }

    /// Why the last [`hold`](Self::hold) found no room (`None`: it did).
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn short(&self) -> Option<Short> {
        self.short
    }

    /// The bound.
    #[cfg_attr(not(any(feature = "sqlite", feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) fn bound(&self) -> &Bound {
        &self.bound
    }

    /// The update was written: its new entries stay counted, its removed
    /// ones are given back.
    pub(crate) fn commit(mut self) {
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

impl<B: Deref<Target = Bound>, T: Deref<Target = FamilyTags>> Drop for FamilyAdmission<B, T> {
    fn drop(&mut self) {
        self.give_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn an_update_holds_only_its_last_attempts_entries() {
        let (bound, tags) = (Bound::new(10, 5), FamilyTags::new());
        let api = bound.family(b"api:", b"");
        let mut update = FamilyAdmission::new(&bound, &tags);
        assert!(update.hold(vec![api, api], vec![]).is_ok());
        assert!(update.hold(vec![api, api], vec![]).is_ok(), "a second run of apply with the same new entries");
        assert_eq!(bound.held(), 7);
        assert!(update.hold(vec![api], vec![]).is_ok());
        assert_eq!(bound.held(), 6);
        // No room for 6 more than the 5 held: past 80% the family's share refuses first.
        assert_eq!(update.hold(vec![api; 6], vec![]), Err(Short::Share(api)));
        assert_eq!(update.short(), Some(Short::Share(api)));
        drop(update);
        assert_eq!(bound.held(), 5, "an admission dropped unwritten gives its room back");
        let mut update = FamilyAdmission::new(&bound, &tags);
        assert!(update.hold(vec![api], vec![api, api, api]).is_ok());
        assert_eq!(update.short(), None);
        update.commit();
        assert_eq!(bound.held(), 3, "written: one added, three removed");
        assert_eq!(tags.written()[api.index()], 1);
    }
}
