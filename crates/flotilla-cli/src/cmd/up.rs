//! `flotilla up [STACK]`: bring a stack up (without one: every stack, in turn): its
//! members and their dependencies, in dependency order, each proven ready before its
//! dependents start.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use flotilla_plan::{Operation, Verb};

/// Arguments of `flotilla up`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The stack (without one: every stack, in turn).
    pub stack: Option<String>,
    /// Leave running components whose effective config changed as they are (by
    /// default they are restarted, in dependency order, the plan saying what changed).
    #[arg(long)]
    pub no_recreate: bool,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let op = |stack: &str| Operation {
        verb: Verb::Start,
        target: stack.to_string(),
        force: false,
        cascade: false,
        no_recreate: args.no_recreate,
    };
    match &args.stack {
        Some(stack) => lifecycle::run_stack(cli, "up", op(stack), &args.run),
        None => lifecycle::every_stack(cli, "up", op, &args.run),
    }
}
