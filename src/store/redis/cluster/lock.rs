//! A lock as a key holds it during a cross-slot update (see `PROTOCOL.md`):
//! the key's value is replaced, for the update's few round trips, by
//!
//! `~<txn>|<lease>|<old pxat>|<new pxat>|<len>|<primary key><len>|<old raw><new raw>`
//!
//! the update's id, its lease on the primary's clock (0 on a key of another
//! slot), the `PXAT` and raw entry the key held and will hold (`''`: none),
//! and the name of the update's primary key, where its outcome is decided.
//! A stored entry starts with a digit or `-`, a lock with `~`: neither is
//! ever mistaken for the other, and a compare-and-set that expects an entry
//! never matches a lock.

use super::super::entry::Raw;
use crate::Millis;

/// True when `raw` is a lock, not an entry.
pub(in crate::store::redis) fn is_lock(raw: &Raw) -> bool {
    raw.as_bytes().first() == Some(&b'~')
}

/// What a reader needs of a lock it met: whose it is, and where that
/// update's outcome is decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Lock {
    pub(super) txn: String,
    pub(super) primary: String,
}

impl Lock {
    /// Reads a lock; `None` if `raw` is not one (or is cut short).
    pub(super) fn parse(raw: &Raw) -> Option<Lock> {
        let text = raw.as_bytes().strip_prefix(b"~")?;
        let mut fields = text.splitn(6, |&b| b == b'|');
        let txn = std::str::from_utf8(fields.next()?).ok()?.to_owned();
        let _lease = fields.next()?;
        let _old_pxat = fields.next()?;
        let _new_pxat = fields.next()?;
        let len: usize = std::str::from_utf8(fields.next()?).ok()?.parse().ok()?;
        let rest = fields.next()?;
        let primary = std::str::from_utf8(rest.get(..len)?).ok()?.to_owned();
        Some(Lock { txn, primary })
    }
}

/// The part of a lock after `~<txn>|<lease>|`, which the prewrite script
/// completes (the lease is on the primary's clock, so the script sets it).
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
        assert_eq!(Lock::parse(&raw), Some(Lock { txn: "00ff".into(), primary: "p:1:abcd:{x|y}".into() }));
        assert_eq!(Lock::parse(&old), None);
        assert_eq!(Lock::parse(&Raw::from_bytes(b"~00ff|1|2|3|99|short".to_vec())), None);
        assert_eq!(expires_at(&old), Some(100));
        assert_eq!(expires_at(&Raw::none()), None);
    }
}
