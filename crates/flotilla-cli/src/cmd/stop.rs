//! `flotilla stop TARGET`: stop a component or stack; refused while dependents run unless
//! `--force` or `--cascade`.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla stop`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack.
    pub target: String,
    /// Stop it even though dependents run.
    #[arg(long)]
    pub force: bool,
    /// Stop running dependents first, in reverse dependency order.
    #[arg(long)]
    pub cascade: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let op = Operation {
        verb: Verb::Stop,
        target: args.target.clone(),
        force: args.force,
        cascade: args.cascade,
        no_recreate: false,
    };
    lifecycle::run(cli, "stop", Some(op), None, &args.run)
}
