//! `flotilla down [STACK]`: take a stack down (without one: every stack, in turn), in the reverse of the order it was started in.
//! External components are never stopped.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla down`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stack (without one: every stack, in turn).
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
    let op = |stack: &str| Operation {
        verb: Verb::Stop,
        target: stack.to_string(),
        force: args.force,
        cascade: args.cascade,
        no_recreate: false,
    };
    match &args.stack {
        Some(stack) => lifecycle::run_stack(cli, "down", op(stack), &args.run),
        None => lifecycle::every_stack(cli, "down", op, &args.run),
    }
}
