//! The contract suite against the stores this crate ships in memory: the bare
//! `MemoryStore` and `Guarded<MemoryStore>`, each with two handles on one store.

use std::sync::Arc;

use limit_store::testing::StorePair;
use limit_store::{Guarded, MemoryStore};

mod memory {
    use super::*;

    async fn pair() -> StorePair {
        let store = MemoryStore::new();
        StorePair { first: Arc::new(store.clone()), second: Arc::new(store) }
    }

    limit_store::contract_tests!(pair);
}

mod guarded_memory {
    use super::*;

    async fn pair() -> StorePair {
        let store = Arc::new(MemoryStore::new());
        StorePair { first: Arc::new(Guarded::new(store.clone())), second: Arc::new(Guarded::new(store)) }
    }

    limit_store::contract_tests!(pair);
}

/// `contract()` lists every case once, and the generated tests cover them all.
#[test]
fn the_suite_lists_each_case_once() {
    let names: Vec<&str> = limit_store::testing::contract().iter().map(|c| c.name()).collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), names.len(), "duplicate case names: {names:?}");
    assert!(names.len() >= 20, "the suite has {} cases", names.len());
}
