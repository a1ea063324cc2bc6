//! `flotilla adopt COMPONENT [--dry-run] [--yes] [--resume | --rollback]`: moves a
//! component whose service runs under another owner (a process started by hand, a
//! systemd unit, a container, a launchd job) to its declared owner, as a plan printed first
//! ([`flotilla_exec::adopt`]): baseline, stop the prior owner, start through
//! Flotilla, acceptance, keep or roll back. Refused (exit 1), nothing changed, when
//! what runs differs from the declaration (each difference listed), when nothing
//! runs it, or while an earlier adopt of it is unfinished (`--resume` finishes it,
//! `--rollback` undoes it). Without a terminal to confirm on, `--yes` is needed.
//! Exit 0 adopted (or rolled back when asked); 1 refused, or the acceptance failed
//! and the prior owner was restored; 3 stuck (neither runs as it should: said).

use crate::{Cli, EXIT_FAILURE, EXIT_OK, EXIT_REFUSED, EXIT_USAGE};
use flotilla_exec::adopt::record::{self, AdoptRecord, Phase};
use flotilla_exec::adopt::run::{Adopt, Ended, Survey};
use flotilla_exec::operate::{Invocation, OperateError};
use flotilla_exec::statedir::StateDir;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `flotilla adopt`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The component (declared in the inventory, running today under another owner).
    pub component: String,
    /// Print the plan (with the baseline measured now) and stop: change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Adopt without asking (needed when there is no terminal to ask on).
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Finish an unfinished adopt of the component from the step it was at.
    #[arg(long, conflicts_with = "rollback")]
    pub resume: bool,
    /// Go back: stop flotilla's instance, restore the prior owner exactly as it was
    /// (its command line, unit or job) and prove it back with the baseline's checks.
    /// Works on an unfinished adopt and on a finished one while its record is kept.
    #[arg(long)]
    pub rollback: bool,
    /// How long flotilla's instance may take to become ready.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
    /// How long the acceptance (or a rollback's proof) may take to pass.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub accept_within: Duration,
    /// Print JSON: the survey ({component, host, adapter, holder, differences,
    /// notes, baseline, dependents, steps}) for a dry run or a refusal, else
    /// {result: adopted|rolled-back|stuck, message, record}.
    #[arg(long)]
    pub json: bool,
}

macro_rules! out {
    ($($t:tt)*) => {{ let _ = writeln!(std::io::stdout(), $($t)*); }};
}
macro_rules! err {
    ($($t:tt)*) => {{ let _ = writeln!(std::io::stderr(), $($t)*); }};
}

/// Runs the subcommand; returns the exit status.
pub fn run(cli: &Cli, args: &Args) -> anyhow::Result<u8> {
    let (loaded, validated) = match super::topology_or_exit(cli)? {
        Ok(v) => v,
        Err(code) => return Ok(code),
    };
    let topology = validated.topology;
    if let Err(bad) =
        super::resolve_target(&topology, "adopt", super::Takes::Component, &args.component)
    {
        return Ok(bad.report());
    }
    let project = topology.project_name().to_string();
    let state = if args.dry_run {
        StateDir::resolve(cli.state_dir.as_deref(), &project)?
    } else {
        StateDir::prepare(cli.state_dir.as_deref(), &project)?
    };
    let fleet = super::authority::transport(cli, &topology)?;
    let quiet = args.json;
    let invocation = Invocation {
        fleet,
        host_timeout: cli.host_timeout,
        cancel: flotilla_exec::CancellationToken::new(),
        topology: Arc::new(topology),
        state: state.clone(),
        base_dir: loaded.base_dir.clone(),
        ready_timeout: args.timeout,
        command_line: std::env::args().collect::<Vec<_>>().join(" "),
        events: Arc::new(move |e| {
            if let Some(line) = flotilla_exec::progress::line(&e) {
                if !quiet {
                    err!("  {line}");
                }
            }
        }),
        show_plan: Box::new(|_| {}),
    };
    let adopt = Adopt {
        invocation,
        component: args.component.clone(),
        accept_within: args.accept_within,
        say: Arc::new(move |line| {
            if !quiet {
                err!("{line}");
            }
        }),
    };
    let rt = super::runtime()?;
    // One adopt at a time, and no other lifecycle change meanwhile.
    let _lock = if args.dry_run {
        None
    } else {
        match adopt.invocation.lock() {
            Ok(l) => Some(l),
            Err(OperateError::Locked(e)) => {
                err!("error: {e}");
                return Ok(EXIT_REFUSED);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let existing = record::load(&state, &args.component)?;
    match existing {
        Some(r) if !r.phase.finished() => {
            if args.dry_run {
                unfinished(&r);
                return Ok(EXIT_REFUSED);
            }
            if args.resume {
                return report(args, rt.block_on(adopt.resume(r))?);
            }
            if args.rollback {
                let reason = format!("asked by `{}`", adopt.invocation.command_line);
                return report(args, rt.block_on(adopt.rollback(r, reason))?);
            }
            unfinished(&r);
            return Ok(EXIT_REFUSED);
        }
        Some(r) if args.rollback && r.phase == Phase::Adopted => {
            if args.dry_run {
                out!(
                    "would roll `{}` back: stop flotilla's instance, then restore {}",
                    r.component,
                    r.prior.describe()
                );
                out!("dry run: nothing was changed");
                return Ok(EXIT_OK);
            }
            let reason = format!("asked by `{}`", adopt.invocation.command_line);
            return report(args, rt.block_on(adopt.rollback(r, reason))?);
        }
        Some(r) if args.rollback => {
            out!(
                "`{}` was already rolled back: {} runs it",
                r.component,
                r.prior.describe()
            );
            return Ok(EXIT_OK);
        }
        None if args.rollback || args.resume => {
            err!(
                "error: no adopt of `{}` to {}",
                args.component,
                if args.rollback { "roll back" } else { "resume" }
            );
            return Ok(EXIT_REFUSED);
        }
        Some(r) if args.resume => {
            out!(
                "the adopt of `{}` is finished ({}): nothing to resume",
                r.component,
                r.phase.describe()
            );
            return Ok(EXIT_OK);
        }
        _ => {}
    }
    let survey = rt.block_on(adopt.survey())?;
    if survey.already_ours() {
        out!(
            "`{}` is already run by flotilla: nothing to adopt",
            survey.component
        );
        return Ok(EXIT_OK);
    }
    if let Some((kind, message)) = survey.refusal() {
        if args.json {
            out!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "refused": { "kind": kind, "message": message },
                    "survey": survey.redacted(),
                }))?
            );
        } else {
            if kind == "differs" {
                let _ = write!(std::io::stdout(), "{}", survey.render());
            }
            err!("refused: {message}");
            err!("nothing was changed");
        }
        return Ok(EXIT_REFUSED);
    }
    if args.json && args.dry_run {
        out!("{}", serde_json::to_string_pretty(&survey.redacted())?);
        return Ok(EXIT_OK);
    }
    if !args.json {
        let _ = write!(std::io::stdout(), "{}", survey.render());
    }
    if args.dry_run {
        out!("dry run: nothing was changed");
        return Ok(EXIT_OK);
    }
    if !args.yes && !confirm(&survey)? {
        return Ok(EXIT_USAGE);
    }
    report(args, rt.block_on(adopt.adopt(&survey))?)
}

/// Asks on the terminal; without one, says that `--yes` is needed. Whether to go on.
fn confirm(survey: &Survey) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        err!(
            "error: adopt changes who runs `{}`: confirm with --yes (there is no terminal to ask on); --dry-run shows the plan",
            survey.component
        );
        return Ok(false);
    }
    let _ = write!(
        std::io::stderr(),
        "Adopt `{}` as planned? [y/N] ",
        survey.component
    );
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().read_line(&mut answer)?;
    let yes = matches!(answer.trim(), "y" | "Y" | "yes");
    if !yes {
        err!("not adopted: nothing was changed");
    }
    Ok(yes)
}

/// Says where an unfinished adopt is, and the two ways out.
fn unfinished(r: &AdoptRecord) {
    err!(
        "refused: an adopt of `{}` is unfinished: it was {} ({}){}",
        r.component,
        r.phase.describe(),
        r.phase.as_str(),
        if r.interrupted() {
            format!(" when its flotilla (pid {}) was interrupted", r.pid)
        } else {
            format!(", by pid {}", r.pid)
        }
    );
    if let Some(last) = r.history.last() {
        err!("  last: {}", last.note);
    }
    err!("  {}", r.ways_out());
}

/// Prints how it ended; its exit status.
fn report(args: &Args, ended: Ended) -> anyhow::Result<u8> {
    let (result, message, code) = match &ended {
        Ended::Adopted(r) => (
            "adopted",
            format!(
                "adopted: flotilla ({}) runs `{}`; `flotilla adopt {} --rollback` goes back to {}",
                r.adapter,
                r.component,
                r.component,
                r.prior.describe()
            ),
            EXIT_OK,
        ),
        Ended::RolledBack(r) => (
            "rolled-back",
            format!(
                "rolled back: {} runs `{}` again ({})",
                r.prior.describe(),
                r.component,
                r.rollback_reason.as_deref().unwrap_or("asked")
            ),
            if args.rollback { EXIT_OK } else { EXIT_REFUSED },
        ),
        Ended::Stuck(_, why) => ("stuck", format!("error: {why}"), EXIT_FAILURE),
    };
    if args.json {
        out!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "result": result,
                "message": message,
                "record": ended.record().redacted(),
            }))?
        );
    } else if code == EXIT_OK {
        out!("{message}");
    } else {
        err!("{message}");
    }
    Ok(code)
}
