//! The guide: how to use limit-store, a topic a page. The pages are
//! `docs/guide/*.md` in the repository, included here so that their examples
//! are compiled and run as doctests, as the README's are.
//!
//! - [`limits`]: `Limits`, decisions, cost, the presets, one budget per client.
//! - [`settings`]: `limit-store.toml`, the environment, limits of your own, reload.
//! - [`service`]: `limit-store serve`, its routes, token, connections and signals.
//! - [`layer`]: the tower layer for axum and the handler helper.
//! - [`envoy`]: Envoy's rate limit service over gRPC.
//! - [`stores`]: the store contract, its rules, the guard, a store of your own.
//! - [`bound`]: how much a store holds, and each limit's share.
//! - [`database`]: the database store on SQLite, PostgreSQL and MySQL.
//! - [`redis`]: the Redis store, Sentinel, eviction.
//! - [`security`]: the token, secrets, what the stores keep of a key.
//! - [`logs`]: every log line's `kind`, its level and when it is written.

#[doc = include_str!("../docs/guide/limits.md")]
pub mod limits {}

#[doc = include_str!("../docs/guide/settings.md")]
pub mod settings {}

#[doc = include_str!("../docs/guide/service.md")]
pub mod service {}

#[doc = include_str!("../docs/guide/layer.md")]
pub mod layer {}

#[doc = include_str!("../docs/guide/envoy.md")]
pub mod envoy {}

#[doc = include_str!("../docs/guide/stores.md")]
pub mod stores {}

#[doc = include_str!("../docs/guide/bound.md")]
pub mod bound {}

#[doc = include_str!("../docs/guide/database.md")]
pub mod database {}

#[doc = include_str!("../docs/guide/redis.md")]
pub mod redis {}

#[doc = include_str!("../docs/guide/security.md")]
pub mod security {}

#[doc = include_str!("../docs/guide/logs.md")]
pub mod logs {}
