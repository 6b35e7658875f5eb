//! `limit-store`: the command-line program. A thin shell: parse, call the
//! library, map errors to exit codes.

mod cli;
mod serve;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("limit-store: {e:#}");
            ExitCode::FAILURE
        }
    }
}
