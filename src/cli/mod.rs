//! The program's commands: parse, call the library, map errors to exit codes.

mod contract;
mod database;
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
    /// Create or upgrade the limit store's table in a database.
    Migrate(database::MigrateArgs),
    /// Remove expired entries from a database store now.
    Sweep(database::StoreArgs),
    /// Show a database store's live entries, fill level and generations.
    Stats(database::StoreArgs),
    /// Run the contract suite against a store: memory, sqlite://, postgres://
    /// or mysql://, with two handles (two pools) as two instances hold it.
    Contract(contract::ContractArgs),
}

/// Runs the parsed command.
pub fn run(args: Args) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    match args.command {
        Command::Demo(a) => runtime.block_on(demo::run(a)),
        Command::Migrate(a) => runtime.block_on(database::migrate(a)),
        Command::Sweep(a) => runtime.block_on(database::sweep(a)),
        Command::Stats(a) => runtime.block_on(database::stats(a)),
        Command::Contract(a) => runtime.block_on(contract::run(a)),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::Args;

    #[test]
    fn arguments_never_show_a_password_or_the_secret() {
        let (password, secret) = ("pa55-hunter2-word", "the-site-secret-0123456789abcdef-0123456789");
        let url = format!("postgres://app:{password}@db/app?sslpassword={password}");
        for line in [
            vec!["limit-store", "migrate", "--database-url", &url],
            vec!["limit-store", "stats", "--database-url", &url, "--secret", secret],
            vec!["limit-store", "sweep", "--database-url", &url, "--secret", secret],
            vec!["limit-store", "contract", &url, "--secret", secret],
        ] {
            let args = Args::try_parse_from(&line).unwrap();
            for text in [format!("{args:?}"), format!("{args:#?}")] {
                assert!(!text.contains(password) && !text.contains(secret), "{text}");
            }
        }
    }
}
