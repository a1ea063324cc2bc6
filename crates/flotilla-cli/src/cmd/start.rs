//! `flotilla start TARGET`: start a component or stack and every upstream dependency that is not
//! already ready.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla start`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// A component or stack.
    pub target: String,
    /// Leave running components whose effective config changed as they are (by
    /// default they are restarted, in dependency order, the plan saying what changed).
    #[arg(long)]
    pub no_recreate: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let op = Operation {
        verb: Verb::Start,
        target: args.target.clone(),
        force: false,
        cascade: false,
        no_recreate: args.no_recreate,
    };
    lifecycle::run(cli, "start", Some(op), None, &args.run)
}
