//! The program's commands: parse, call the library, map errors to exit codes.

mod check;
mod contract;
mod database;
mod demo;
mod redis;
mod serve;

use std::path::Path;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use limit_store::config::Config;

/// The store behind rate limits.
#[derive(Debug, Parser)]
#[command(name = "limit-store", version, about)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
    /// The least level logged (RUST_LOG, when set, says more).
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    /// How log lines are written: text for people, json for log shippers.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Count a burst of sign-in attempts on the embedded default (the memory
    /// store, through the guard) and show each decision.
    Demo(demo::DemoArgs),
    /// Serve the limits over HTTP (JSON), for apps in any language.
    Serve(serve::ServeArgs),
    /// Create or upgrade the limit store's table in a database.
    Migrate(database::MigrateArgs),
    /// Remove expired entries from a database or Redis store now.
    Sweep(database::StoreArgs),
    /// Show a database or Redis store's live entries, fill level and
    /// generations (and, on Redis, whether it may evict entries).
    Stats(database::StoreArgs),
    /// Run the contract suite against a store: memory, sqlite://, postgres://,
    /// mysql:// or redis://, with two handles (two pools or connections) as
    /// two instances hold it.
    Contract(contract::ContractArgs),
    /// Check a settings file (./limit-store.toml when not given): exit 0
    /// when it is good, and print the limits it defines.
    CheckConfig(check::CheckArgs),
}

/// Runs the parsed command.
pub fn run(args: Args) -> anyhow::Result<()> {
    logging(&args.log_level, args.log_format)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.command {
        Command::Demo(a) => runtime.block_on(demo::run(a)),
        Command::Serve(a) => runtime.block_on(serve::run(a)),
        Command::Migrate(a) => runtime.block_on(database::migrate(a)),
        Command::Sweep(a) => runtime.block_on(database::sweep(a)),
        Command::Stats(a) => runtime.block_on(database::stats(a)),
        Command::Contract(a) => runtime.block_on(contract::run(a)),
        Command::CheckConfig(a) => runtime.block_on(async { check::run(a) }),
    }
}

/// Installs the log subscriber: the library's warnings (`kind = ...`) reach
/// the operator on stderr.
fn logging(level: &str, format: LogFormat) -> anyhow::Result<()> {
    use tracing_subscriber::filter::LevelFilter;
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(filter) if !filter.is_empty() => {
            EnvFilter::try_new(&filter).with_context(|| format!("RUST_LOG={filter:?} is not a log filter"))?
        }
        // A level alone: EnvFilter would take any other word for a module's
        // name, and log nothing else.
        _ => match level.parse::<LevelFilter>() {
            Ok(level) => EnvFilter::new(level.to_string()),
            Err(_) => anyhow::bail!("--log-level {level:?} is not a level: use error, warn, info, debug or trace"),
        },
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    }
    .map_err(|e| anyhow::anyhow!("install the log subscriber: {e}"))
}

/// The settings file every subcommand reads when given none.
const SETTINGS_FILE: &str = "limit-store.toml";

/// The settings every subcommand reads: `path`, or `./limit-store.toml`
/// when it exists, then the environment.
fn settings(path: Option<&Path>) -> anyhow::Result<Config> {
    let default = Path::new(SETTINGS_FILE);
    match path {
        Some(path) => Ok(Config::load(path)?),
        None if default.exists() => Ok(Config::load(default)?),
        None => {
            let mut config = Config::default();
            config.apply_env(|var| std::env::var(var).ok())?;
            Ok(config)
        }
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
            vec!["limit-store", "serve", "--token", secret],
            vec!["limit-store", "serve", "--secret", secret],
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
