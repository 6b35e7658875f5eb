//! The contract suite against the database store on SQLite, PostgreSQL and
//! MySQL/MariaDB, each with two pools (two instances) on one database, bare
//! and through the guard; and with the settings that change how a count runs
//! (SQLite in place, PostgreSQL remembering no rows).

use std::sync::Arc;

use crate::common::db::{pair, pair_with, server, sqlite_url};
use limit_store::testing::StorePair;
use limit_store::Guarded;

fn guarded(pair: StorePair) -> StorePair {
    StorePair { first: Arc::new(Guarded::new(pair.first)), second: Arc::new(Guarded::new(pair.second)) }
}

mod sqlite {
    use super::*;
    async fn factory() -> StorePair {
        pair(&sqlite_url("contract"), "limit_store").await
    }
    limit_store::contract_tests!(factory);
}

mod postgres {
    use super::*;
    async fn factory() -> Option<StorePair> {
        Some(pair(&server("LIMIT_STORE_TEST_POSTGRES")?, "limit_store_contract").await)
    }
    limit_store::contract_tests!(factory);
}

mod mysql {
    use super::*;
    async fn factory() -> Option<StorePair> {
        Some(pair(&server("LIMIT_STORE_TEST_MYSQL")?, "limit_store_contract").await)
    }
    limit_store::contract_tests!(factory);
}

mod guarded_postgres {
    use super::*;
    async fn factory() -> Option<StorePair> {
        Some(guarded(pair(&server("LIMIT_STORE_TEST_POSTGRES")?, "limit_store_contract_guarded").await))
    }
    limit_store::contract_tests!(factory);
}

mod guarded_mysql {
    use super::*;
    async fn factory() -> Option<StorePair> {
        Some(guarded(pair(&server("LIMIT_STORE_TEST_MYSQL")?, "limit_store_contract_guarded").await))
    }
    limit_store::contract_tests!(factory);
}

mod postgres_remembering_nothing {
    use super::*;
    async fn factory() -> Option<StorePair> {
        let url = server("LIMIT_STORE_TEST_POSTGRES")?;
        Some(pair_with(&url, "limit_store_contract_plain", |b| b.remember_rows(0)).await)
    }
    limit_store::contract_tests!(factory);
}
