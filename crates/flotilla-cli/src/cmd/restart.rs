//! `flotilla restart TARGET`: restart a component alone, or with `--cascade` its running dependents too.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla restart`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack.
    pub target: String,
    /// Also restart its running dependents, in order.
    #[arg(long)]
    pub cascade: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let op = Operation {
        verb: Verb::Restart,
        target: args.target.clone(),
        force: false,
        cascade: args.cascade,
        no_recreate: false,
    };
    lifecycle::run(cli, "restart", Some(op), None, &args.run)
}
