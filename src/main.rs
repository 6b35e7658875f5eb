//! `limit-store`: the command-line program. A thin shell over the library.

use std::process::ExitCode;

const USAGE: &str = "\
limit-store — the store behind rate limits

usage:
  limit-store version      print the version
  limit-store demo         count a burst of sign-in attempts in the memory store
  limit-store help         this text

serve, migrate, sweep, stats and contract arrive with the database store and the service.";

fn main() -> ExitCode {
    let arg = std::env::args().nth(1);
    match arg.as_deref() {
        None | Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some("version" | "--version" | "-V") => {
            println!("limit-store {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("limit-store: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
