//! Integer counts: a capability a store may offer beside the contract, for
//! a count whose whole state is one integer; see [`IntegerCounts`].

use crate::{Millis, StoreError};

/// What a count does with one key's integer: given the live entry's
/// integer and when it expires (`None`: no live entry, or one that holds
/// anything but an integer) and the store's clock, it answers the integer
/// to hold and when it expires, or `None` to leave the key as it is. Pure
/// and synchronous, as an [`Apply`](crate::Apply) is.
pub type IntegerStep<'a> = dyn FnMut(Option<(i64, Millis)>, Millis) -> Option<(i64, Millis)> + 'a;

/// A store's integer counts: a capability a store may offer beside the contract,
/// through [`LimitStore::integer_counts`](crate::LimitStore::integer_counts),
/// for a count whose whole state is one integer (a GCRA's TAT): the store
/// hands the integer to a step and holds what it gives back, with no JSON
/// built, parsed or checked, and no list of keys or writes.
///
/// [`Limits`](crate::Limits) counts through it where a store offers it, and
/// through [`update`](crate::LimitStore::update) everywhere else; both leave
/// the same entry (a bare JSON integer), so a store may offer it or not and
/// the counts read the same either way.
///
/// Which stores offer it:
/// - the memory store does: a count there is a hash and a short lock, and
///   the JSON round trip was most of what was left;
/// - [`Guarded`](crate::Guarded) offers its inner store's, for a store that
///   answers at once, with its own rules on each count (a panic answered
///   unavailable, a failure logged);
/// - the database stores should not: a count there is a round trip and a
///   commit, beside which the JSON costs nothing, and their rows hold JSON
///   text that other versions read;
/// - Redis should, once it counts with a short integer script of its own:
///   its round trip stays, its script's JSON goes. Its calls wait on the
///   network, which [`IntegerCounter::count`] does not: that needs a
///   counterpart that answers through a future first.
pub trait IntegerCounts: Send + Sync {
    /// A counter of the keys that begin with `prefix` (a limit part's
    /// `{limit}:{part}:`), made once and kept, so that the store may do
    /// once what every key after it shares (the memory store hashes it).
    fn counter(&self, prefix: &str) -> Box<dyn IntegerCounter>;
}

/// Counts the keys that begin with one prefix: see [`IntegerCounts::counter`].
pub trait IntegerCounter: Send + Sync {
    /// Atomically, on the key that is the prefix followed by `rest`, under
    /// the rules of [`update`](crate::LimitStore::update) for one key: runs
    /// `step` on its integer and the store's clock, then holds what it
    /// answered (an expiry at or before that clock removes the key). Here
    /// and now, without waiting on I/O or a lock held across a call. A key
    /// of more than [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES) is refused, as
    /// `update` refuses it; an error writes nothing.
    fn count(&self, rest: &str, step: &mut IntegerStep<'_>) -> Result<(), StoreError>;
}
