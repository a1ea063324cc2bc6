//! `flotilla plan VERB TARGET`: what an operation would do, computed by the pure
//! planner against the observed state; nothing is changed.

use crate::{render, Cli, EXIT_OK, EXIT_REFUSED, EXIT_USAGE};
use flotilla_model::Observed;
use flotilla_plan::{Operation, Verb};
use std::path::PathBuf;

/// The verbs `plan` accepts (`up`/`down` are `start`/`stop` of a stack).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanVerb {
    /// Start a component or stack and its upstream dependencies.
    Start,
    /// Stop a component or stack.
    Stop,
    /// Restart a component (alone, or with --cascade its dependents too).
    Restart,
    /// Start a stack.
    Up,
    /// Stop a stack, in the reverse of the order it was started in.
    Down,
}

/// Arguments of `flotilla plan`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The operation.
    #[arg(value_enum)]
    pub verb: PlanVerb,
    /// Component or stack name.
    pub target: String,
    /// stop: stop the target even though dependents run (they are listed as impact).
    #[arg(long)]
    pub force: bool,
    /// stop: stop running dependents first; restart: restart them too.
    #[arg(long)]
    pub cascade: bool,
    /// `start`/`up`: leave running components whose effective config changed as they
    /// are (by default the plan restarts them, saying what changed).
    #[arg(long)]
    pub no_recreate: bool,
    /// Print the plan as JSON (format 1: {format, operation, topology_digest,
    /// observed_digest, waves: [{steps: [{component, host, action, adapter, owner,
    /// reason}]}], cleanup, impact}); a refusal prints {"refusal": {operation, reasons}}.
    #[arg(long)]
    pub json: bool,
    /// Plan against this observed state instead of what runs now (JSON: {"components": {NAME: {lifecycle,
    /// health, observability, started_by: "nobody" | {"flotilla": {operation}} |
    /// {"foreign": {evidence}}}}, "stacks": {NAME: {start_order}}}). A component it does
    /// not list is unknown, never stopped.
    #[arg(long, value_name = "FILE")]
    pub observed: Option<PathBuf>,
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (_, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    // Shared with the world that observes it, not copied; and never freed: the
    // process ends after printing the plan, and freeing a large topology piece by
    // piece would only delay that.
    let shared = std::sync::Arc::new(validated.topology);
    std::mem::forget(std::sync::Arc::clone(&shared));
    let topology: &flotilla_model::Topology = &shared;
    let (typed, takes) = match args.verb {
        PlanVerb::Start => ("plan start", super::Takes::Either),
        PlanVerb::Stop => ("plan stop", super::Takes::Either),
        PlanVerb::Restart => ("plan restart", super::Takes::Either),
        PlanVerb::Up => ("plan up", super::Takes::Stack),
        PlanVerb::Down => ("plan down", super::Takes::Stack),
    };
    let verb = match args.verb {
        PlanVerb::Start | PlanVerb::Up => Verb::Start,
        PlanVerb::Stop | PlanVerb::Down => Verb::Stop,
        PlanVerb::Restart => Verb::Restart,
    };
    let op = Operation {
        verb,
        target: args.target.clone(),
        force: args.force,
        cascade: args.cascade,
        no_recreate: args.no_recreate,
    };
    // A target the verb cannot take is a usage error, found before observing.
    if let Err(bad) = super::resolve_target(topology, typed, takes, &args.target) {
        if args.json && bad.is_unknown() {
            println!("{}", serde_json::to_string_pretty(&bad.refusal_json(&op))?);
        }
        return Ok(bad.report());
    }
    let observed: Observed = match &args.observed {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| crate::usage_from(format!("cannot read {}", p.display()), e))?;
            serde_json::from_str(&text).map_err(|e| {
                crate::usage_from(
                    format!("{} is not a valid observed-state document", p.display()),
                    e,
                )
            })?
        }
        None => {
            super::runtime()?
                .block_on(super::world(cli, std::sync::Arc::clone(&shared))?.observe(&[]))?
                .1
        }
    };
    match flotilla_plan::plan(topology, &observed, &op) {
        Ok(plan) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&plan)?);
            } else {
                print!("{}", render::plan(&plan));
            }
            Ok(EXIT_OK)
        }
        Err(refusal) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "refusal": refusal }))?
                );
            } else if let (true, Err(bad)) = (
                refusal.is_unknown_target(),
                super::resolve_target(topology, typed, takes, &args.target),
            ) {
                bad.report();
            } else {
                let word = typed.trim_start_matches("plan ");
                for line in flotilla_plan::render::refusal_lines(&refusal, word) {
                    eprintln!("{line}");
                }
            }
            Ok(if refusal.is_unknown_target() {
                EXIT_USAGE
            } else {
                EXIT_REFUSED
            })
        }
    }
}
