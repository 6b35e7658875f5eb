//! What a row holds and how an update turns rows into writes; the same for
//! every backend, so they differ only in SQL.

use crate::error::Unavailable;
use crate::rules::run_apply;
use crate::{Apply, Entry, Millis, StoreError, Write};

use crate::bound::{Bound, FamilyAdmission, FamilyId, FamilyTags, Short, Tag};

/// A row's name: HMAC-SHA-256 of the key.
pub(super) use crate::key_hash::KeyHash;

/// A row as stored. A row a backend created only to lock a new key has
/// generation 0 and expires at 0: never live.
#[derive(Clone, Debug)]
pub(super) struct Stored {
    pub(super) generation: i64,
    pub(super) value: String,
    pub(super) expires_at: Millis,
}

/// Turns the locked rows of an update and the database's `now` into writes.
pub(super) type Decide<'a> = dyn FnMut(&[Option<Stored>], Millis) -> Result<Vec<RowWrite>, StoreError> + Send + 'a;

/// A [`Decide`] that owns all it uses, shared with a thread that may run it
/// (SQLite's writer, for `update_owned`).
#[cfg(feature = "sqlite")]
pub(super) type OwnedDecide = std::sync::Arc<parking_lot::Mutex<Decide<'static>>>;

/// A key's family, and its tag as the `family` column holds it (the tag's
/// 16 bits as a signed `smallint`; see `bound/tags.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Family {
    pub(super) id: FamilyId,
    pub(super) column: i16,
}

impl Family {
    pub(super) fn new(id: FamilyId, tag: Tag) -> Self {
        Family { id, column: i16::from_be_bytes(tag.to_be_bytes()) }
    }
}

/// The tag of a `family` column's value.
pub(super) fn tag_of_column(column: i16) -> Tag {
    Tag::from_be_bytes(column.to_be_bytes())
}

/// What to do with one row. A put carries the key's family column, which
/// every statement that inserts a row writes.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum RowWrite {
    Keep,
    Put { value: String, expires_at: Millis, family: i16 },
    Delete,
}

/// The live entry of `row` at `now` for this store's generation; a value that
/// does not parse fails this key with a `corrupt` error naming its hash.
pub(super) fn live_entry(
    row: Option<&Stored>,
    hash: &KeyHash,
    now: Millis,
    generation: i64,
) -> Result<Option<Entry>, StoreError> {
    match row {
        Some(row) if row.generation == generation && row.expires_at > now => {
            let value = serde_json::from_str(&row.value).map_err(|e| StoreError::Corrupt {
                key_hash: crate::key_hash::hex(hash),
                detail: format!("its value is not JSON ({e})"),
                source: Some(Box::new(e)),
            })?;
            Ok(Some(Entry { value, expires_at: row.expires_at }))
        }
        _ => Ok(None),
    }
}

/// [`live_entry`] of a row as the columns hold it, under a zero key hash: the
/// fuzz targets' way in (feature `fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) fn decode_columns(
    generation: i64,
    value: &str,
    expires_at: Millis,
    now: Millis,
    store_generation: i64,
) -> Result<Option<Entry>, StoreError> {
    let row = Stored { generation, value: value.to_owned(), expires_at };
    live_entry(Some(&row), &[0; 32], now, store_generation)
}

/// Runs `apply` over the rows of one locked update (of keys of `families`)
/// and answers the row writes, or `unavailable (full)` when the writes need
/// room the bound, or their family's share of it, does not have.
#[allow(clippy::too_many_arguments)]
pub(super) fn decide<B, T>(
    rows: &[Option<Stored>],
    hashes: &[KeyHash],
    families: &[Family],
    now: Millis,
    generation: i64,
    apply: &mut Apply<'_>,
    admission: &mut FamilyAdmission<B, T>,
) -> Result<Vec<RowWrite>, StoreError>
where
    B: std::ops::Deref<Target = Bound>,
    T: std::ops::Deref<Target = FamilyTags>,
{
    let entries = rows
        .iter()
        .zip(hashes)
        .map(|(row, hash)| live_entry(row.as_ref(), hash, now, generation))
        .collect::<Result<Vec<_>, _>>()?;
    let writes = run_apply(apply, &entries, now)?;
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    for ((write, entry), family) in writes.iter().zip(&entries).zip(families) {
        match write {
            Write::Put(_) if entry.is_none() => added.push(family.id),
            // `run_apply` made an expired `Put` a `Delete`.
            Write::Delete if entry.is_some() => removed.push(family.id),
            _ => {}
        }
    }
    if let Err(short) = admission.hold(added, removed) {
        return Err(full(admission.bound(), short));
    }
    Ok(writes
        .into_iter()
        .zip(rows.iter().zip(&entries).zip(families))
        .map(|(write, ((row, entry), family))| match write {
            Write::Put(e) => {
                RowWrite::Put { value: e.value.to_string(), expires_at: e.expires_at, family: family.column }
            }
            Write::Delete if row.is_some() => RowWrite::Delete,
            // A row that is not live (a lock-only row, or an expired one) goes now.
            Write::Keep if row.is_some() && entry.is_none() => RowWrite::Delete,
            Write::Keep | Write::Delete => RowWrite::Keep,
        })
        .collect())
}

/// The answer of a store at its bound, or of a family at its share. Names
/// the family, never a key.
#[cold]
fn full(bound: &Bound, short: Short) -> StoreError {
    let max = bound.max();
    let detail = match short {
        Short::Bound => format!("the database store holds its bound of {max} live entries"),
        Short::Share(family) => format!(
            "the keys of the family `{}` hold their share of the database store's bound of {max} live entries \
             (past 80% of it, a family adds new keys only while it holds no more than the room left)",
            bound.family_name(family)
        ),
    };
    StoreError::unavailable(Unavailable::Full, detail)
}

/// Runs `decide` over the one row of a single-key count, as read at `now`:
/// that key's write (keep when `decide` answers none).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn decide_one(decide: &mut Decide<'_>, row: &Option<Stored>, now: Millis) -> Result<RowWrite, StoreError> {
    let writes = decide(std::slice::from_ref(row), now)?;
    Ok(writes.into_iter().next().unwrap_or(RowWrite::Keep))
}

/// The one conditional statement an optimistic single-key update needs: it
/// writes only if the row is still as read, so a concurrent update makes it
/// write nothing, and the caller falls back to the locked path.
#[cfg(any(feature = "postgres", feature = "mysql"))]
#[derive(Debug)]
pub(super) enum Conditional {
    /// Nothing to write: the read alone was the update.
    Nothing,
    /// Insert the row, unless one has appeared since the read.
    Insert { value: String, expires_at: Millis, family: i16 },
    /// Replace the row, if it still holds what was read. The family is
    /// written again: a row from before the `family` column holds none.
    Replace { old: Stored, value: String, expires_at: Millis, family: i16 },
    /// Delete the row, if it still holds what was read.
    Delete { old: Stored },
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl Conditional {
    pub(super) fn new(row: Option<Stored>, write: RowWrite) -> Self {
        match (write, row) {
            (RowWrite::Keep, _) | (RowWrite::Delete, None) => Conditional::Nothing,
            (RowWrite::Put { value, expires_at, family }, None) => Conditional::Insert { value, expires_at, family },
            (RowWrite::Put { value, expires_at, family }, Some(old)) => {
                Conditional::Replace { old, value, expires_at, family }
            }
            (RowWrite::Delete, Some(old)) => Conditional::Delete { old },
        }
    }
}

/// The row of a key after `write` over `row` commits.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(super) fn row_after(row: &Option<Stored>, write: &RowWrite, generation: i64) -> Option<Stored> {
    match write {
        RowWrite::Keep => row.clone(),
        RowWrite::Put { value, expires_at, .. } => {
            Some(Stored { generation, value: value.clone(), expires_at: *expires_at })
        }
        RowWrite::Delete => None,
    }
}

/// A `decide` for the backends' tests: `n + 1` on a row holding `n` (1 on
/// none), expiring a minute on; the clock each run was given goes to `nows`.
#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
pub(super) fn add_one(
    nows: &mut Vec<Millis>,
) -> impl FnMut(&[Option<Stored>], Millis) -> Result<Vec<RowWrite>, StoreError> + Send + '_ {
    |rows, now| {
        nows.push(now);
        let n: u64 = rows[0].as_ref().map_or(0, |r| r.value.parse().unwrap());
        Ok(vec![RowWrite::Put { value: (n + 1).to_string(), expires_at: now + 60_000, family: 0 }])
    }
}
