//! `flotilla tui`: the terminal UI (the `tui` module): this machine's components
//! (the inventory, as `status`), or with `--server` the authority's fleet and its
//! questions.

use crate::Cli;
use std::time::Duration;

/// Arguments of `flotilla tui`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How often to observe again (the screen is drawn only when something changed).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub interval: Duration,
    /// How long each component an action starts may take to become ready.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    crate::tui::run(
        cli,
        &crate::tui::Options {
            interval: args.interval.max(Duration::from_millis(100)),
            ready_timeout: args.timeout,
        },
    )
}
