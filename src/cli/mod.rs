//! The program's commands. `serve`, `migrate`, `sweep`, `stats` and `contract`
//! join `demo` as the database store and the service land.

mod demo;

use clap::{Parser, Subcommand};

/// The store behind rate limits.
#[derive(Debug, Parser)]
#[command(name = "limit-store", version, about)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Count a burst of sign-in attempts on the embedded default (the memory
    /// store, through the guard) and show each decision.
    Demo(demo::DemoArgs),
}

/// Runs the parsed command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.command {
        Command::Demo(demo) => runtime.block_on(demo::run(demo)),
    }
}
