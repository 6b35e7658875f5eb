//! A stored row of every database (the SQL stores' columns, Redis's string):
//! the properties of `tests/properties/stored_row.rs` on the fuzzer's bytes.
#![no_main]

#[path = "../../tests/properties/stored_row.rs"]
mod stored_row;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(input) = stored_row::Input::from_bytes(data) {
        stored_row::check(&input);
    }
});
