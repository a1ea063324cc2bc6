//! `flotilla apply PLAN.json`: apply a plan saved with `flotilla plan … --json`;
//! refused when the inventory or what runs changed since it was computed.

use super::lifecycle::{self, RunOpts};
use crate::Cli;
use std::path::PathBuf;

/// Arguments of `flotilla apply`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The plan (JSON, as printed by `flotilla plan … --json`).
    pub plan: PathBuf,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let text = std::fs::read_to_string(&args.plan)
        .map_err(|e| crate::usage_from(format!("cannot read plan {}", args.plan.display()), e))?;
    let plan: flotilla_plan::Plan = serde_json::from_str(&text).map_err(|e| {
        crate::usage_from(
            format!(
                "{} is not a plan (expected the JSON printed by `flotilla plan … --json`)",
                args.plan.display()
            ),
            e,
        )
    })?;
    if plan.format != flotilla_plan::PLAN_FORMAT {
        return Err(crate::usage(format!(
            "{} has plan format {}, this flotilla reads format {}",
            args.plan.display(),
            plan.format,
            flotilla_plan::PLAN_FORMAT
        )));
    }
    lifecycle::run(cli, "apply", None, Some(plan), &args.run)
}
