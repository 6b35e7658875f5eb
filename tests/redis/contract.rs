//! The contract suite against the Redis store: two stores (two instances,
//! two connections) on one server, bare and through the guard, and with no
//! remembered entries (every count reads first).

use std::sync::Arc;

use crate::common::redis::server;
use limit_store::testing::StorePair;
use limit_store::{Guarded, RedisStore, RedisStoreBuilder};

const SECRET: &str = "limit-store redis contract tests: a secret of 32+ bytes";

/// Two stores on one server, under a prefix of their own: cases use unique
/// keys, but a sweep reaches every key of its generation, and the sweep
/// case of one module must not remove what another's let expire.
async fn pair_with(tune: fn(RedisStoreBuilder) -> RedisStoreBuilder) -> Option<StorePair> {
    use std::hash::{BuildHasher, Hasher};
    let url = server()?;
    let prefix = format!("lsc-{:x}", std::collections::hash_map::RandomState::new().build_hasher().finish());
    let open = || async {
        tune(RedisStore::builder(&url).secret(SECRET).prefix(&prefix).sweep_every(None)).connect().await.unwrap()
    };
    Some(StorePair { first: Arc::new(open().await), second: Arc::new(open().await) })
}

mod bare {
    use super::*;
    async fn factory() -> Option<StorePair> {
        pair_with(|b| b).await
    }
    limit_store::contract_tests!(factory);
}

mod guarded {
    use super::*;
    async fn factory() -> Option<StorePair> {
        let pair = pair_with(|b| b).await?;
        Some(StorePair { first: Arc::new(Guarded::new(pair.first)), second: Arc::new(Guarded::new(pair.second)) })
    }
    limit_store::contract_tests!(factory);
}

mod remembering_nothing {
    use super::*;
    async fn factory() -> Option<StorePair> {
        pair_with(|b| b.remember(0)).await
    }
    limit_store::contract_tests!(factory);
}
