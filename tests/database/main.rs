//! The database store on SQLite, PostgreSQL and MariaDB: the contract, its
//! behaviour beyond it, and exactness across processes. One test binary, its
//! tests side by side on the shared servers (each on tables and keys of its
//! own); the tests that stop or restart a server are in `tests/outage/`.

#[path = "../common/mod.rs"]
mod common;

#[cfg(all(feature = "sqlite", feature = "postgres"))]
mod batches;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod bound;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod contract;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql", feature = "redis"))]
mod exactness;
#[cfg(feature = "postgres")]
mod first_count;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod in_transaction;
#[cfg(feature = "mysql")]
mod mysql_store;
mod postgres_flat_table;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod shares;
#[cfg(feature = "sqlite")]
mod sqlite_file;
#[cfg(feature = "sqlite")]
mod sqlite_owned;
#[cfg(feature = "sqlite")]
mod sqlite_sound;
#[cfg(all(feature = "sqlite", feature = "postgres", feature = "mysql"))]
mod store;
mod sweeper;
