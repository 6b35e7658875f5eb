//! How large one store call may be: the keys it names and the value each
//! holds. The contract's checks ([`rules`](crate::rules)) refuse a call past
//! them, and the refusals ([`RefusedInput`](crate::error::RefusedInput)) name
//! them; both read them here.

/// Most keys one call may name.
pub const MAX_KEYS: usize = 32;
/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// Largest value, in bytes of its JSON serialization.
pub const MAX_VALUE_BYTES: usize = 4096;
