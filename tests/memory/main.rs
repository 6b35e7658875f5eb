//! The memory store, the guard and the contract suite: one test binary, its
//! tests side by side (none stops a server or sets process-wide state). The
//! flood of keys that measures the process's memory is `tests/memory_flood.rs`,
//! a binary of its own.

#[path = "../common/mod.rs"]
mod common;

mod broken_store;
mod contract;
mod contract_catches_broken;
mod guard;
mod guard_sound;
mod model;
mod readme_example;
mod shares;
mod store;
mod sweeper;
