//! `flotilla down STACK`: take a stack down, in the reverse of the order it was started in.
//! External components are never stopped.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla down`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stack (without one: list the stacks).
    pub stack: Option<String>,
    /// Stop the stack even though components outside it depend on it.
    #[arg(long)]
    pub force: bool,
    /// Stop those dependents first.
    #[arg(long)]
    pub cascade: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let Some(stack) = &args.stack else {
        return lifecycle::no_stack(cli, "down");
    };
    let op = Operation {
        verb: Verb::Stop,
        target: stack.clone(),
        force: args.force,
        cascade: args.cascade,
        no_recreate: false,
    };
    lifecycle::run_stack(cli, "down", op, &args.run)
}
