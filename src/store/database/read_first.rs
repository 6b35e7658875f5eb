//! Whether a count on a key this store has not seen reads its row first, or
//! guesses that the row is missing: whichever the keys not seen before lately
//! called for.
//!
//! After a deploy or a restart, or beside other instances, most such keys
//! have rows: a guess
//! that the row is missing then costs a statement that reads it, and the
//! count's write a second. On brand-new keys most don't, and the guess is the
//! one statement the count needs. So a store guesses while guesses hold, and
//! while rows tend to be there it reads first instead (on PostgreSQL in a
//! read shared with the other counts reading at the same time: see
//! `postgres/reader.rs`). Either way the count stays exact: only the
//! statements it takes differ. PostgreSQL and MySQL keep one each.

use std::sync::atomic::{AtomicI32, Ordering};

/// How far the tally leans either way: after this many keys the other way
/// in a row, the store changes its mind.
const LEAN: i32 = 16;

/// A tally of keys not seen before: up for each that had a row, down for
/// each that did not.
#[derive(Debug, Default)]
pub(super) struct ReadFirst(AtomicI32);

impl ReadFirst {
    /// True when keys not seen before lately had rows: reading first pays.
    pub(super) fn pays(&self) -> bool {
        self.0.load(Ordering::Relaxed) > 0
    }

    /// Notes whether a key not seen before had a row.
    pub(super) fn note_row(&self, had_row: bool) {
        let step = |n: i32| Some(if had_row { (n + 1).min(LEAN) } else { (n - 1).max(-LEAN) });
        let _ = self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, step);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leans_to_what_keys_were_lately_and_turns_back_within_the_lean() {
        let t = ReadFirst::default();
        assert!(!t.pays(), "a new store guesses");
        t.note_row(true);
        assert!(t.pays());
        for _ in 0..1_000 {
            t.note_row(true);
        }
        for _ in 0..LEAN {
            t.note_row(false);
        }
        assert!(!t.pays(), "{LEAN} new keys in a row turn it back");
        for _ in 0..1_000 {
            t.note_row(false);
        }
        t.note_row(true);
        assert!(!t.pays());
    }
}
