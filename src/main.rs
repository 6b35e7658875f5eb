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

/// The error and its causes, joined by ": ", each said once: a cause whose
/// text the line already holds is left out (redis-rs's I/O errors and the
/// store's unavailable errors repeat their cause's text as their own).
fn chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}
