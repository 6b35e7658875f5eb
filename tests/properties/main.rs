//! The proptest twins of the fuzz targets (`fuzz/fuzz_targets/`): each
//! `fuzz_<target>.rs` runs the properties in `<target>.rs`, which the fuzz
//! target includes too, on generated input. One test binary.

mod fuzz_config;
mod fuzz_keys;
#[cfg(feature = "serve")]
mod fuzz_serve_body;
#[cfg(all(feature = "fuzzing", feature = "sqlite", feature = "redis"))]
mod fuzz_stored_row;
