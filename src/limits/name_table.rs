//! [`NameTable`]: the limits of an app by name, found on every attempt. An app
//! has a few (the presets and some of its own), so each name's [`tag`] (its
//! length and its bytes: all of a name up to seven bytes, mixed for a longer
//! one) is hashed by one multiplication into a small table with no two tags
//! in one place, found once when the limits are built: a lookup reads one
//! place and, for a name of up to seven bytes, compares no bytes at all.
//! Past [`SLOTTED_UP_TO`] names, or when no such table is found, a hash map
//! finds them.

/// The most names found through [`Slots`].
const SLOTTED_UP_TO: usize = 64;

/// Values by name, in the order given.
pub(super) struct NameTable<T> {
    entries: Box<[(Box<str>, T)]>,
    /// Each entry's name's [`tag`], in the same order.
    tags: Box<[u64]>,
    find: Find,
}

/// How [`NameTable`] finds a name.
enum Find {
    /// Each tag in its own place.
    Slots(Slots),
    /// Many names, or names whose tags no table keeps apart.
    Hashed(hashbrown::HashMap<Box<str>, usize>),
}

/// A table where `tag * seed >> shift` is the place of each entry's tag, and
/// no two share one.
struct Slots {
    seed: u64,
    shift: u32,
    /// The entry at each place, [`EMPTY`] for none.
    at: Box<[u8]>,
}

/// Where `name` is in `index`: out of line, so that the usual lookup (through
/// [`Slots`]) stays small.
#[inline(never)]
fn hashed(index: &hashbrown::HashMap<Box<str>, usize>, name: &str) -> Option<usize> {
    index.get(name).copied()
}

/// A place of [`Slots`] with no entry.
const EMPTY: u8 = u8::MAX;

impl Slots {
    /// A table for `tags` (distinct, at most [`SLOTTED_UP_TO`]), with as
    /// many places as the square of their number (at most 4,096 bytes), so
    /// that about every other seed keeps them apart; `None` when no seed
    /// tried does.
    fn new(tags: &[u64]) -> Option<Self> {
        let bits = (tags.len() * tags.len()).max(4).next_power_of_two().trailing_zeros();
        let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
        for _ in 0..10_000 {
            // Odd multipliers from a fixed sequence: the same table every run.
            seed = seed.wrapping_mul(0xBF58_476D_1CE4_E5B9).wrapping_add(0x94D0_49BB_1331_11EB) | 1;
            let mut slots = Slots { seed, shift: 64 - bits, at: vec![EMPTY; 1 << bits].into_boxed_slice() };
            let apart = tags.iter().enumerate().all(|(i, &tag)| {
                let place = slots.place(tag);
                let free = slots.at[place] == EMPTY;
                slots.at[place] = u8::try_from(i).unwrap_or(EMPTY);
                free
            });
            if apart {
                return Some(slots);
            }
        }
        None
    }

    fn place(&self, tag: u64) -> usize {
        usize::try_from(tag.wrapping_mul(self.seed) >> self.shift).unwrap_or(0)
    }
}

impl<T> NameTable<T> {
    /// The values by their names; a name given twice keeps its last value.
    pub(super) fn new(given: impl IntoIterator<Item = (String, T)>) -> Self {
        let mut entries: Vec<(Box<str>, T)> = Vec::new();
        for (name, value) in given {
            match entries.iter_mut().find(|(n, _)| **n == *name) {
                Some(entry) => entry.1 = value,
                None => entries.push((name.into_boxed_str(), value)),
            }
        }
        let tags: Box<[u64]> = entries.iter().map(|(name, _)| tag(name)).collect();
        let distinct = tags.iter().collect::<std::collections::HashSet<_>>().len() == tags.len();
        let slots = (entries.len() <= SLOTTED_UP_TO && distinct).then(|| Slots::new(&tags)).flatten();
        let find = match slots {
            Some(slots) => Find::Slots(slots),
            None => Find::Hashed(entries.iter().enumerate().map(|(i, (name, _))| (name.clone(), i)).collect()),
        };
        NameTable { entries: entries.into_boxed_slice(), tags, find }
    }

    /// The value named `name`.
    pub(super) fn get(&self, name: &str) -> Option<&T> {
        self.position(name).map(|i| &self.entries[i].1)
    }

    /// The value at `index`, a [`position`](Self::position) this gave.
    pub(super) fn at(&self, index: usize) -> &T {
        &self.entries[index].1
    }

    /// Where the value named `name` is.
    pub(super) fn position(&self, name: &str) -> Option<usize> {
        match &self.find {
            Find::Slots(slots) => {
                let tag = tag(name);
                let i = usize::from(slots.at[slots.place(tag)]);
                // Equal tags are equal names up to seven bytes; longer ones compare the rest.
                let found = *self.tags.get(i)? == tag && (name.len() < TAGGED || *self.entries[i].0 == *name);
                found.then_some(i)
            }
            Find::Hashed(index) => hashed(index, name),
        }
    }

    /// Every value, in the order given.
    #[cfg(test)]
    fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, value)| value)
    }

    /// Every name, in the order given.
    pub(super) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(name, _)| &**name)
    }
}

/// The bytes of a name a [`tag`] holds.
const TAGGED: usize = 8;

/// `name`'s length (up to 255) in the top byte and, below it, its bytes:
/// all of them for a name of up to seven bytes (so two such names have equal
/// tags only when they are equal), else its seven-byte pieces mixed.
#[inline]
fn tag(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let len = u64::from(u8::try_from(bytes.len()).unwrap_or(u8::MAX));
    let below = if bytes.len() < TAGGED { piece(bytes) } else { mixed(bytes) };
    len << 56 | below
}

/// Up to seven bytes as one word, the first lowest: read as two words that
/// may overlap (a byte read twice lands in the same place), with no loop.
#[inline]
fn piece(bytes: &[u8]) -> u64 {
    let n = bytes.len();
    let byte = |i: usize| u64::from(bytes[i]) << (8 * i);
    match n {
        0 => 0,
        1..=3 => byte(0) | byte(n / 2) | byte(n - 1),
        _ => {
            let word = |i: usize| u64::from(u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]));
            word(0) | word(n - 4) << (8 * (n - 4))
        }
    }
}

/// A longer name's seven-byte pieces mixed into 56 bits.
#[inline(never)]
fn mixed(bytes: &[u8]) -> u64 {
    let mixed = bytes
        .chunks(TAGGED - 1)
        .fold(0u64, |mixed, p| mixed.rotate_left(23).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ piece(p));
    mixed & ((1 << 56) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_is_its_bytes_in_place() {
        let bytes: Vec<u8> = (1..=7).map(|b| b * 31).collect();
        for n in 0..=7 {
            let expected = bytes[..n].iter().enumerate().fold(0u64, |w, (i, &b)| w | u64::from(b) << (8 * i));
            assert_eq!(piece(&bytes[..n]), expected, "{n} bytes");
        }
    }

    #[test]
    fn finds_every_name_slotted_or_hashed() {
        for count in [0, 1, 2, 9, SLOTTED_UP_TO, SLOTTED_UP_TO + 1, 300] {
            let names: Vec<String> = (0..count).map(|i| format!("limit-{i}")).collect();
            let table = NameTable::new(names.iter().cloned().zip(0..));
            assert_eq!(matches!(table.find, Find::Hashed(_)), count > SLOTTED_UP_TO, "{count}");
            for (i, name) in names.iter().enumerate() {
                assert_eq!(table.get(name), Some(&i), "{name} of {count}");
                assert_eq!(table.get(name), Some(&i));
            }
            assert_eq!(table.get("limit-"), None);
            assert_eq!(table.get(&format!("limit-{count}")), None);
            assert_eq!(table.names().count(), count);
            assert_eq!(table.values().sum::<usize>(), (0..count).sum::<usize>());
        }
    }

    #[test]
    fn names_alike_in_their_tags_are_told_apart() {
        // Same first seven bytes, or same length, or a prefix: each found as
        // itself, and a name that shares a found name's tag is not it.
        let slotted = ["api", "ap", "apj", "a", "", "sign-in", "sign-im", "passwor", "password", "password-reset"];
        let absent = ["apk", "sign-i", "sign-in2", "passwora", "password-resex", "password-rese", "x"];
        let table = NameTable::new(slotted.iter().map(|n| n.to_string()).zip(0..));
        assert!(matches!(table.find, Find::Slots(_)));
        for (i, name) in slotted.iter().enumerate() {
            assert_eq!(table.get(name), Some(&i), "{name:?}");
        }
        for name in absent {
            assert_eq!(table.get(name), None, "{name:?}");
        }
        // Long names are found by all their bytes, not their first seven.
        let long = ["x".repeat(300), "x".repeat(301), "sign-in2".to_owned(), "sign-in3".to_owned()];
        let table = NameTable::new(long.iter().cloned().zip(0..));
        for (i, name) in long.iter().enumerate() {
            assert_eq!(table.get(name), Some(&i), "{name:?}");
        }
        assert_eq!(table.get(&"x".repeat(299)), None);
        assert_eq!(table.get("sign-in4"), None);
    }

    #[test]
    fn a_longer_name_with_a_found_tag_is_compared_in_full() {
        // Mixed tags of longer names may meet; make one meet, as if by chance.
        let mut table = NameTable::new([("password-reset".to_owned(), 0)]);
        let other = "password-resex";
        table.tags[0] = tag(other);
        let Find::Slots(slots) = &mut table.find else { panic!("one name is slotted") };
        let place = slots.place(tag(other));
        slots.at[place] = 0;
        assert_eq!(table.get(other), None);
    }

    #[test]
    fn a_name_given_twice_keeps_its_last_value() {
        let table = NameTable::new([("api".to_owned(), 1), ("sign-in".to_owned(), 2), ("api".to_owned(), 3)]);
        assert_eq!(table.get("api"), Some(&3));
        assert_eq!(table.names().collect::<Vec<_>>(), ["api", "sign-in"]);
    }
}
