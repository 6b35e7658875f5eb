//! The stored-row decoders, for the fuzz targets (`fuzz/`) and their proptest
//! twins (`tests/fuzz_*.rs`). Feature `fuzzing`; not API: hidden from the
//! docs and free to change in any release.
//!
//! Everything else the targets drive is public already: [`Config::parse`](crate::config::Config::parse),
//! [`check_keys`](crate::rules::check_keys), [`Algorithm::check_cost`](crate::limits::Algorithm::check_cost)
//! and, compiled into the target from the program's source (`src/serve/`), the
//! service's router.

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
/// What the SQL stores (SQLite, PostgreSQL, MariaDB) read from a row with
/// these columns at `now`, for a store whose secret has `store_generation`:
/// the live entry, none, or a `corrupt` error.
pub fn decode_sql_row(
    generation: i64,
    value: &str,
    expires_at: crate::Millis,
    now: crate::Millis,
    store_generation: i64,
) -> Result<Option<crate::Entry>, crate::StoreError> {
    crate::store::database::row::decode_columns(generation, value, expires_at, now, store_generation)
}

#[cfg(feature = "redis")]
/// What the Redis store reads from a key holding `bytes` at `now` (an empty
/// string is a missing key): the live entry, none, or a `corrupt` error.
pub fn decode_redis_value(bytes: &[u8], now: crate::Millis) -> Result<Option<crate::Entry>, crate::StoreError> {
    crate::store::redis::entry::Raw::from_bytes(bytes.to_vec()).decode(now, String::new)
}
