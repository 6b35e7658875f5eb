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
            eprintln!("limit-store: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, joined by ": ", each said once: some errors
/// (redis-rs's on I/O) repeat their cause's text as their own.
fn chain(e: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !said.last().is_some_and(|last| last.ends_with(&text)) {
            said.push(text);
        }
    }
    said.join(": ")
}
