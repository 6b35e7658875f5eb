//! Families of keys, the unit a store's bound is shared by. A key's family is
//! its text before its first `:`: in the keys [`Limits`](crate::Limits)
//! writes (`{limit}:{part}:{value}`) the limit's name, and in an app's own
//! keys whatever it puts first. Every key without a `:` is of one family.
//!
//! A store names a bounded number of families: the first ones it meets get an
//! id of their own, for the store's life, and every later one shares the id
//! [`FamilyId::OTHER`]. So no one can grow a store's memory by inventing
//! names, and the families a site's limits name are named first (`Limits`
//! names them when it is built, before any count).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// Family ids a store hands out, the two unnamed ones included.
pub(crate) const FAMILIES: usize = 64;
/// Places in the index from names to ids: twice the names, so that a lookup
/// probes few places.
const INDEX: usize = 2 * FAMILIES;

/// A family of keys, as one store names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FamilyId(u8);

impl FamilyId {
    /// Every key without a `:`.
    pub(crate) const NO_COLON: FamilyId = FamilyId(0);
    /// Every family met after the store had named all it names.
    pub(crate) const OTHER: FamilyId = FamilyId(1);
    /// The first id given to a name.
    const FIRST_NAMED: u8 = 2;

    /// The id as an index below [`FAMILIES`].
    pub(crate) fn index(self) -> usize {
        usize::from(self.0)
    }

    /// The id whose [`index`](Self::index) is `index` (kept beside an entry);
    /// an index past the ids reads as [`FamilyId::OTHER`].
    pub(crate) fn from_index(index: usize) -> Self {
        u8::try_from(index).ok().filter(|&i| usize::from(i) < FAMILIES).map_or(FamilyId::OTHER, FamilyId)
    }
}

/// The names of a store's families, and their ids. A lookup takes no lock
/// and its cost does not grow with the families named; only naming a new
/// family (at most [`FAMILIES`] times in a store's life) takes one.
#[derive(Debug)]
pub(crate) struct Families {
    /// Keyed at random, so that no one can choose names that share places.
    hasher: RandomState,
    /// By id: the name, once given.
    names: Box<[OnceLock<Box<str>>]>,
    /// Open addressing from a name's hash to its id; 0 for an empty place.
    index: Box<[AtomicU8]>,
    /// Ids given so far (the unnamed two included).
    given: AtomicUsize,
    /// Held while a name is given an id.
    naming: Mutex<()>,
}

impl Families {
    pub(crate) fn new() -> Self {
        Families {
            hasher: RandomState::new(),
            names: (0..FAMILIES).map(|_| OnceLock::new()).collect(),
            index: (0..INDEX).map(|_| AtomicU8::new(0)).collect(),
            given: AtomicUsize::new(usize::from(FamilyId::FIRST_NAMED)),
            naming: Mutex::new(()),
        }
    }

    /// The family of the key whose text is `head` followed by `tail` (two
    /// pieces, so that a key held as a fixed start and a rest needs no copy
    /// of either), named now if it is new and there is room.
    pub(crate) fn of(&self, head: &[u8], tail: &[u8]) -> FamilyId {
        let (head, tail) = match head.iter().position(|&b| b == b':') {
            Some(colon) => (&head[..colon], &b""[..]),
            None => match tail.iter().position(|&b| b == b':') {
                Some(colon) => (head, &tail[..colon]),
                None => return FamilyId::NO_COLON,
            },
        };
        let mut hasher = self.hasher.build_hasher();
        hasher.write(head);
        hasher.write(tail);
        // Truncation wanted: the low bits pick the first place.
        #[allow(clippy::cast_possible_truncation)]
        let first = hasher.finish() as usize % INDEX;
        match self.find(first, head, tail) {
            Ok(id) => id,
            Err(_) if self.given.load(Ordering::Relaxed) >= FAMILIES => FamilyId::OTHER,
            Err(_) => self.give_id(first, head, tail),
        }
    }

    /// The name of `family`, for log lines and errors.
    pub(crate) fn name(&self, family: FamilyId) -> &str {
        match family {
            FamilyId::NO_COLON => "(keys without ':')",
            FamilyId::OTHER => "(other families)",
            FamilyId(id) => self.names[usize::from(id)].get().map_or("(other families)", |name| name),
        }
    }

    /// The id of the name `head` + `tail` from the place `first` on, or the
    /// first empty place met.
    fn find(&self, first: usize, head: &[u8], tail: &[u8]) -> Result<FamilyId, usize> {
        for probe in 0..INDEX {
            let place = (first + probe) % INDEX;
            let id = self.index[place].load(Ordering::Acquire);
            if id == 0 {
                return Err(place);
            }
            let name = self.names[usize::from(id)].get().map_or(&b""[..], |name| name.as_bytes());
            if name.len() == head.len() + tail.len() && name.starts_with(head) && name.ends_with(tail) {
                return Ok(FamilyId(id));
            }
        }
        Err(INDEX) // never: the index has room for every id
    }

    /// Gives the name `head` + `tail` an id, unless another caller just did
    /// or every id is given.
    #[cold]
    fn give_id(&self, first: usize, head: &[u8], tail: &[u8]) -> FamilyId {
        let _naming = self.naming.lock();
        let place = match self.find(first, head, tail) {
            Ok(id) => return id,
            Err(place) => place,
        };
        let id = self.given.load(Ordering::Relaxed);
        let (Ok(short), true) = (u8::try_from(id), id < FAMILIES && place < INDEX) else { return FamilyId::OTHER };
        let mut name = String::from_utf8_lossy(head).into_owned();
        name.push_str(&String::from_utf8_lossy(tail));
        let _ = self.names[id].set(name.into_boxed_str());
        self.index[place].store(short, Ordering::Release);
        self.given.store(id + 1, Ordering::Relaxed);
        FamilyId(short)
    }
}

/// A count per family, as a sweep tallies what it removed.
#[derive(Debug)]
pub(crate) struct PerFamily([u64; FAMILIES]);

impl PerFamily {
    pub(crate) fn new() -> Self {
        PerFamily([0; FAMILIES])
    }

    /// Adds one to `family`'s count.
    pub(crate) fn add_one(&mut self, family: FamilyId) {
        self.0[family.index()] += 1;
    }

    /// Each family with a count, and its count.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (FamilyId, u64)> + '_ {
        self.0.iter().enumerate().filter(|(_, &n)| n > 0).map(|(i, &n)| (FamilyId::from_index(i), n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_the_text_before_the_first_colon() {
        let families = Families::new();
        let api = families.of(b"api:client:192.0.2.1", b"");
        assert_eq!(families.name(api), "api");
        assert_eq!(families.of(b"api:other", b""), api);
        assert_eq!(families.of(b"ap", b"i:client:x"), api, "the colon may come in the second piece");
        assert_eq!(families.of(b"api:", b"x:y"), api);
        let sign_in = families.of(b"sign-in:account:", b"ada@example.com");
        assert_ne!(sign_in, api);
        assert_eq!(families.name(sign_in), "sign-in");
        assert_eq!(families.of(b"no colon at all", b""), FamilyId::NO_COLON);
        assert_eq!(families.of(b"", b"nor here"), FamilyId::NO_COLON);
        assert_eq!(families.of(b":leading", b""), families.of(b":", b""), "an empty family is a family");
    }

    /// Names past the last id share one; those named before keep theirs.
    #[test]
    fn the_families_named_are_bounded() {
        let families = Families::new();
        let first = families.of(b"first:", b"");
        let named: Vec<FamilyId> = (0..FAMILIES * 3).map(|i| families.of(format!("f{i}:").as_bytes(), b"")).collect();
        let own = named.iter().filter(|&&id| id != FamilyId::OTHER).count();
        assert_eq!(own, FAMILIES - 3, "every id but the two unnamed ones and `first`'s");
        assert!(named[FAMILIES..].iter().all(|&id| id == FamilyId::OTHER));
        assert_eq!(families.of(b"first:again", b""), first);
        assert_eq!(families.name(first), "first");
        assert_eq!(families.of(b"f0:", b""), named[0]);
        assert_eq!(families.name(FamilyId::OTHER), "(other families)");
    }

    #[test]
    fn concurrent_lookups_of_a_new_name_agree() {
        let families = Families::new();
        let ids: Vec<FamilyId> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4).map(|_| s.spawn(|| families.of(b"same:", b""))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|&id| id == ids[0] && id != FamilyId::OTHER), "{ids:?}");
    }
}
