//! The proptest twin of the `keys` fuzz target (`fuzz/fuzz_targets/keys.rs`):
//! the same properties (`properties/keys.rs`) on generated key lists around
//! every rule's edge: none, 32 and 33 keys, 1024 and 1025 bytes, repeats.

#[path = "keys.rs"]
mod keys;

use limit_store::MemoryStore;
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c]{0,2}",
        1 => (1020usize..1030).prop_map(|n| "k".repeat(n)),
        1 => (340usize..344).prop_map(|n| "é€".repeat(n / 2)),
        1 => "\\PC{0,12}",
    ]
}

proptest! {
    #[test]
    fn check_keys_and_the_store_agree_with_the_rules(keys in prop::collection::vec(key(), 0..36)) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let store = runtime.block_on(async { MemoryStore::new() });
        keys::check(&keys, &runtime, &store);
    }
}
