//! `flotilla operations [show ID]`: the journal of mutating invocations and their steps.

use crate::{render, Cli, EXIT_OK};
use flotilla_exec::statedir::StateDir;
use flotilla_store::{OperationId, Store};

/// Arguments of `flotilla operations`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub show: Option<Show>,
    /// Print JSON (a list of operations, or {"operation", "steps"} for `show`).
    #[arg(long, global = true)]
    pub json: bool,
    /// How many operations to list, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

/// `operations show ID`.
#[derive(clap::Subcommand, Debug)]
pub enum Show {
    /// One operation with every step and its evidence.
    Show {
        /// `op-12` or `12`.
        id: String,
    },
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let project = match &cli.project {
        Some(p) => p.clone(),
        None => match super::topology_or_exit(cli)? {
            Ok((_, v)) => v.topology.project_name().to_string(),
            Err(code) => return Ok(code),
        },
    };
    let state = StateDir::resolve(cli.state_dir.as_deref(), &project)?;
    if !state.database().exists() {
        if args.json {
            println!("[]");
        } else {
            println!(
                "no operations yet ({} does not exist)",
                state.database().display()
            );
        }
        return Ok(EXIT_OK);
    }
    let store = Store::open(&state.database())?;
    match &args.show {
        None => {
            let ops = store.operations(args.limit)?;
            if args.json {
                println!("{}", serde_json::to_string_pretty(&ops)?);
                return Ok(EXIT_OK);
            }
            let mut rows = vec![vec![
                "ID".to_string(),
                "STARTED".into(),
                "TOOK".into(),
                "OUTCOME".into(),
                "WHO".into(),
                "COMMAND".into(),
            ]];
            for o in ops {
                rows.push(vec![
                    o.id.to_string(),
                    crate::render::when(o.started_at_ms),
                    o.ended_at_ms
                        .map(|e| format!("{} ms", e - o.started_at_ms))
                        .unwrap_or_else(|| "-".into()),
                    o.outcome.as_str().into(),
                    o.who.clone(),
                    o.command_line.clone(),
                ]);
            }
            print!("{}", render::table(&rows));
            Ok(EXIT_OK)
        }
        Some(Show::Show { id }) => {
            let Ok(id) = id.parse::<OperationId>() else {
                return Err(crate::usage(format!(
                    "`{id}` is not an operation id (e.g. op-12)"
                )));
            };
            let Some((op, steps)) = store.operation(id)? else {
                return Err(crate::usage(format!("no operation {id}")));
            };
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "operation": op, "steps": steps })
                    )?
                );
                return Ok(EXIT_OK);
            }
            println!(
                "{} `{}` by {} (pid {})",
                op.id, op.command_line, op.who, op.pid
            );
            println!(
                "  started {}, outcome {}{}",
                crate::render::when(op.started_at_ms),
                op.outcome.as_str(),
                op.error
                    .as_ref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            );
            println!("  plan {}  topology {}", op.plan_digest, op.topology_digest);
            for s in steps {
                let summary = s
                    .evidence
                    .get("summary")
                    .and_then(|v| v.as_str())
                    .unwrap_or("");
                println!(
                    "  wave {} {} {}: {} ({}) {}",
                    s.wave,
                    s.action,
                    s.component,
                    s.outcome.as_str(),
                    s.ended_at_ms
                        .map(|e| format!("{} ms", e - s.started_at_ms))
                        .unwrap_or_else(|| "unfinished".into()),
                    summary
                );
            }
            Ok(EXIT_OK)
        }
    }
}
