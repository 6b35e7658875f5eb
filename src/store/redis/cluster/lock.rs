//! A lock as a key holds it during a cross-slot update (see `PROTOCOL.md`):
//! the key's value is replaced, for the update's few round trips, by
//!
//! `~<txn>|<lease>|<old pxat>|<new pxat>|<len>|<primary key><len>|<old raw><new raw>`
//!
//! the update's id, its lease (until when, on the clock of the key's own
//! node; 0 in a lock an earlier version left off its primary key), the
//! `PXAT` and raw entry the key held and will hold (`''`: none), and the
//! name of the update's primary key, where its outcome is decided.
//! A stored entry starts with a digit or `-`, a lock with `~`: neither is
//! ever mistaken for the other, and a compare-and-set that expects an entry
//! never matches a lock.

use super::super::entry::Raw;
use crate::Millis;

/// True when `raw` is a lock, not an entry.
pub(in crate::store::redis) fn is_lock(raw: &Raw) -> bool {
    raw.as_bytes().first() == Some(&b'~')
}

/// What a reader needs of a lock it met: whose it is, where that update's
/// outcome is decided, and the entries the key holds on either outcome.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Lock {
    pub(super) txn: String,
    /// Until when (ms, on the clock of the key's node) readers leave it be.
    pub(super) lease: Millis,
    pub(super) primary: String,
    /// The entry the key held before the update (its value unless the
    /// update commits).
    pub(super) old: Raw,
    /// The entry the key takes if the update commits.
    pub(super) new: Raw,
}

impl Lock {
    /// Reads a lock; `None` if `raw` is not one (or is cut short).
    pub(super) fn parse(raw: &Raw) -> Option<Lock> {
        let text = raw.as_bytes().strip_prefix(b"~")?;
        let mut fields = text.splitn(6, |&b| b == b'|');
        let txn = std::str::from_utf8(fields.next()?).ok()?.to_owned();
        let lease = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
        let _old_pxat = fields.next()?;
        let _new_pxat = fields.next()?;
        let len: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
        let rest = fields.next()?;
        let primary = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
        let (old_len, entries) = split_once(rest.get(len..)?, b'|')?;
        let old_len: usize = std::str::from_utf8(old_len).ok()?.parse().ok()?;
        let old = Raw::from_bytes(entries.get(..old_len)?.to_vec());
        let new = Raw::from_bytes(entries.get(old_len..)?.to_vec());
        Some(Lock { txn, lease, primary, old, new })
    }
}

/// `bytes` before and after the first `sep`.
fn split_once(bytes: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == sep)?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// The part of a lock after `~<txn>|<lease>|`, which the prewrite script
/// completes (the lease is on the key's node's clock, so the script sets it).
pub(super) fn body(primary: &str, old: &Raw, old_pxat: Millis, new: &Raw, new_pxat: Millis) -> Vec<u8> {
    let mut out = format!("{old_pxat}|{new_pxat}|{}|{primary}{}|", primary.len(), old.as_bytes().len()).into_bytes();
    out.extend_from_slice(old.as_bytes());
    out.extend_from_slice(new.as_bytes());
    out
}

/// The expiry an entry carries (`<expires_at>|…`), if `raw` is one.
pub(super) fn expires_at(raw: &Raw) -> Option<Millis> {
    let bytes = raw.as_bytes();
    let bar = bytes.iter().position(|&b| b == b'|')?;
    std::str::from_utf8(&bytes[..bar]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_names_its_update_and_primary() {
        let old = Raw::from_bytes(b"100|{\"n\":1}".to_vec());
        let new = Raw::from_bytes(b"200|{\"n\":2}".to_vec());
        let mut raw = b"~00ff|5000|".to_vec();
        raw.extend(body("p:1:abcd:{x|y}", &old, 105, &new, 205));
        let raw = Raw::from_bytes(raw);
        assert!(is_lock(&raw) && !is_lock(&old) && !is_lock(&Raw::none()));
        let lock = Lock { txn: "00ff".into(), lease: 5000, primary: "p:1:abcd:{x|y}".into(), old: old.clone(), new };
        assert_eq!(Lock::parse(&raw), Some(lock));
        let gone = Lock::parse(&Raw::from_bytes(b"~01|1|0|0|1|p0|".to_vec())).unwrap();
        assert_eq!((gone.old, gone.new), (Raw::none(), Raw::none()));
        assert_eq!(Lock::parse(&old), None);
        assert_eq!(Lock::parse(&Raw::from_bytes(b"~00ff|1|2|3|99|short".to_vec())), None);
        assert_eq!(expires_at(&old), Some(100));
        assert_eq!(expires_at(&Raw::none()), None);
    }
}
