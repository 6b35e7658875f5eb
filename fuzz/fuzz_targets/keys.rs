//! The key rules (`check_keys`) and a store that applies them: the properties
//! of `tests/properties/keys.rs` on the fuzzer's bytes.
#![no_main]

#[path = "../../tests/properties/keys.rs"]
mod keys;

use std::sync::OnceLock;

use limit_store::MemoryStore;

fn store() -> &'static (tokio::runtime::Runtime, MemoryStore) {
    static STORE: OnceLock<(tokio::runtime::Runtime, MemoryStore)> = OnceLock::new();
    STORE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        let store = runtime.block_on(async { MemoryStore::new() });
        (runtime, store)
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(list) = keys::from_bytes(data) {
        let (runtime, store) = store();
        keys::check(&list, runtime, store);
    }
});
