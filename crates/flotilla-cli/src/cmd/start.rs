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
    };
    lifecycle::run(cli, Some(op), None, &args.run)
}
