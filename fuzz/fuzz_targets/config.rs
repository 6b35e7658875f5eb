//! `limit-store.toml` and its environment overrides: the properties of
//! `tests/properties/config.rs` on the fuzzer's bytes.
#![no_main]

#[path = "../../tests/properties/config.rs"]
mod config;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(input) = config::Input::from_bytes(data) {
        config::check(&input);
    }
});
