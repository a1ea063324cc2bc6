//! `flotilla up STACK`: bring a stack up: its members and their dependencies, in dependency order, each
//! proven ready before its dependents start.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stack.
    pub stack: String,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let op = Operation {
        verb: Verb::Start,
        target: args.stack.clone(),
        force: false,
        cascade: false,
    };
    lifecycle::run_stack(cli, op, &args.run)
}
