//! The serve API's request bodies, through the real router: the properties of
//! `tests/properties/serve_body.rs` on the fuzzer's bytes.
#![no_main]

// The service is the program's (`src/serve/`), not the library's: compiled
// here from its source, as the program compiles it.
#[allow(dead_code, unused_imports)]
#[path = "../../src/serve/mod.rs"]
mod serve;
#[path = "../../tests/properties/serve_body.rs"]
mod serve_body;

use std::cell::RefCell;

thread_local! {
    static SERVICE: RefCell<serve_body::Service> = RefCell::new(serve_body::Service::new());
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(input) = serve_body::Input::from_bytes(data) {
        SERVICE.with(|s| s.borrow_mut().check(&input));
    }
});
