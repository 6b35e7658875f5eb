//! Where a key lives: its 128-bit SipHash-1-3 under the store's random key,
//! which is all the store holds of it, and the shard and table hash taken
//! from that; and a fixed start of keys hashed once ([`KeyStart`]), so that
//! a limit's count hashes only the rest of its key.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use super::sip::{self, Started};
use crate::bound::{Bound, FamilyId};
use crate::error::RefusedInput;
use crate::StoreError;

/// Shards of a store, each behind its own lock.
pub(super) const SHARDS: usize = 64;

/// Where a slot's key keeps its family: the top six bits of the 128-bit hash,
/// which name no key (the table hashes by the low half). The other 122 bits
/// name it: two keys sharing them would need about 2^61 tries by someone who
/// knew the store's random key.
pub(super) const FAMILY_SHIFT: u32 = 122;
/// The bits of a key's hash that name it.
pub(super) const IDENTITY: u128 = (1 << FAMILY_SHIFT) - 1;
const _: () = assert!(crate::bound::FAMILIES <= 1 << (128 - FAMILY_SHIFT));

/// Where one key of a call lives.
#[derive(Clone, Copy)]
pub(super) struct Located {
    /// The key's hash, its family's bits clear ([`IDENTITY`]).
    pub(super) key: u128,
    pub(super) hash: u64,
    pub(super) shard: usize,
}

/// The table's hash of a key: the low half of its 128 bits.
pub(super) fn low_half(key: u128) -> u64 {
    // Truncation wanted: the table hashes by the key's low 64 bits.
    #[allow(clippy::cast_possible_truncation)]
    let low = key as u64;
    low
}

/// Where the key `start` followed by `rest` lives, or the rules' refusal of
/// it, as `check_keys` gives it.
pub(super) fn located_after(start: &KeyStart, rest: &[u8]) -> Result<Located, StoreError> {
    let len = start.len() + rest.len();
    if len == 0 {
        return Err(RefusedInput::EmptyKey { index: 0 }.into());
    }
    if len > crate::MAX_KEY_BYTES {
        return Err(RefusedInput::KeyTooLong { index: 0, len }.into());
    }
    Ok(KeyHasher::locate_after(start, rest))
}

/// The fixed start of keys (a limit's `{limit}:{part}:`), hashed once, so
/// that a count hashes only the rest of its key: the same 128-bit hash as
/// the whole key's, since SipHash reads its input as one stream of bytes.
#[derive(Clone)]
pub(super) struct KeyStart {
    started: Started,
    family: StartFamily,
}

/// The family of the keys after a start.
#[derive(Clone)]
enum StartFamily {
    /// The start holds a `:`: every key after it is of this family.
    Known(FamilyId),
    /// It holds none (its text, kept): the rest says.
    Open(Box<[u8]>),
}

/// Shows the length, never the hash state (it holds the store's key).
impl std::fmt::Debug for KeyStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyStart").field("len", &self.len()).finish_non_exhaustive()
    }
}

impl KeyStart {
    /// The start's length in bytes.
    pub(super) fn len(&self) -> usize {
        self.started.len()
    }

    /// The family of the key this start followed by `rest` names. Out of
    /// line: only a new entry asks, and a count keeps less alive without it.
    #[inline(never)]
    pub(super) fn family(&self, rest: &[u8], bound: &Bound) -> FamilyId {
        match &self.family {
            StartFamily::Known(family) => *family,
            StartFamily::Open(start) => bound.family(start, rest),
        }
    }
}

/// Hashes a store's keys under its random SipHash key.
pub(super) struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl KeyHasher {
    /// A hasher under a new random key: std's `RandomState` is seeded from
    /// the OS, and hashing anything with two of them gives two unpredictable
    /// 64-bit keys without another dependency.
    pub(super) fn random() -> Self {
        KeyHasher { k0: RandomState::new().hash_one(0u8), k1: RandomState::new().hash_one(1u8) }
    }

    /// Where `key` lives.
    pub(super) fn locate(&self, key: &str) -> Located {
        Self::located(sip::hash(self.k0, self.k1, key.as_bytes()))
    }

    /// `start` hashed once, for the keys that begin with it, whose family
    /// is `family` when the start holds a `:`.
    pub(super) fn key_start(&self, start: &str, family: Option<FamilyId>) -> KeyStart {
        let family = match family {
            Some(family) => StartFamily::Known(family),
            None => StartFamily::Open(start.as_bytes().into()),
        };
        KeyStart { started: Started::new(self.k0, self.k1, start.as_bytes()), family }
    }

    /// [`locate`](Self::locate) of the key `start` followed by `rest`.
    fn locate_after(start: &KeyStart, rest: &[u8]) -> Located {
        Self::located(start.started.hash(rest))
    }

    /// Where the key whose 128-bit hash is `key` lives.
    fn located(key: u128) -> Located {
        let hash = low_half(key);
        // Middle bits pick the shard: hashbrown uses the low bits for the bucket
        // and the top seven as the tag, and both must still vary within a shard.
        let shard = usize::try_from(hash >> 40).unwrap_or(0) & (SHARDS - 1);
        Located { key: key & IDENTITY, hash, shard }
    }
}
