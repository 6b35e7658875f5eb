//! The proptest twins of the fuzz targets (`fuzz/fuzz_targets/`): each
//! `fuzz_<target>.rs` runs the properties in `<target>.rs`, which the fuzz
//! target includes too, on generated input. One test binary; the twin of
//! `serve_body` runs with the program's own tests (`src/serve/mod.rs`), where
//! the router it drives is.

mod fuzz_config;
mod fuzz_keys;
#[cfg(all(feature = "fuzzing", feature = "sqlite", feature = "redis"))]
mod fuzz_stored_row;
