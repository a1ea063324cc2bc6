//! The authority as a controller: lifecycle operations (start, stop, restart of a
//! component; up, down of a stack) on the **selected revision's** topology, planned
//! and shown first, applied only on confirmation, exactly as planned.
//!
//! It is the CLI's `flotilla_exec::operate::Invocation`, run inside the authority:
//! - steps and observations of components on `agent` hosts go through the
//!   authority's own call queue ([`queue::InProcess`], no HTTP to itself) to their
//!   agents, as `flotilla --server` sends them; components on other hosts are not
//!   driven from here (a plan that would change one is refused, naming the command
//!   to run from a terminal instead);
//! - its journal and lifecycle lock live in `<authority dir>/controller/projects/<project>/`
//!   (written by the API process, which may run as the unprivileged API user: it
//!   owns the authority directory; nothing here needs more);
//! - [`propose`] computes the plan (`Invocation::run(op, None, dry_run)`) and keeps
//!   it under a random id for [`runs::PROPOSAL_TTL`]; [`confirm`] applies exactly
//!   that plan (`Invocation::run(None, Some(plan), false)`) in a background task:
//!   a plan gone stale (the revision or what runs changed) gets the CLI's refusal,
//!   and a second operation while one runs gets the lifecycle lock's.
//!
//! Code map: [`runs`] (what is held in memory), [`queue`] (the in-process call
//! queue and the transport), [`command`] (the equivalent `flotilla` command lines).

pub mod command;
pub mod queue;
pub mod runs;

use crate::state::AppState;
use crate::ui::hub::Topic;
use flotilla_exec::executor::Event;
use flotilla_exec::operate::{Invocation, InvocationOutcome, OperateError};
use flotilla_exec::statedir::StateDir;
use flotilla_exec::this_process::now_ms;
use flotilla_model::inventory::TransportKind;
use flotilla_model::topology::Topology;
use flotilla_plan::{Operation, Plan, Refusal};
use flotilla_store::authority::AuthorityStore;
use runs::{Proposal, Run, RunOutcome};
use std::sync::Arc;

/// Why an operation could not be planned or confirmed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// This authority runs without a controller directory.
    #[error("this authority does not run operations (no controller directory)")]
    Off,
    /// No revision is selected, so there is nothing to operate on.
    #[error("no revision is selected: publish one first (`flotilla config publish`)")]
    NoRevision,
    /// The plan asked for was never made, was applied already, or expired.
    #[error("this plan is no longer available (applied already, or older than {} minutes): plan again", runs::PROPOSAL_TTL.as_secs() / 60)]
    UnknownPlan,
    /// The state directory could not be resolved.
    #[error("cannot use the controller's state directory")]
    StateDir(#[source] std::io::Error),
    /// Planning failed (journal, state directory, secrets).
    #[error(transparent)]
    Operate(#[from] OperateError),
}

/// What planning an operation gave.
#[derive(Debug, Clone)]
pub enum Proposed {
    /// A plan, kept for confirmation under [`Proposal::id`].
    Plan(Proposal),
    /// A plan that would change components this authority does not drive
    /// (`component`, `host`, `transport` of each): shown, never applied here.
    NotDriven {
        /// The plan.
        plan: Plan,
        /// `(component, host, transport)` of each such step.
        outside: Vec<(String, String, String)>,
    },
    /// The planner refused (the CLI's refusal).
    Refused(Refusal),
}

/// The controller's state directory for `topology`'s project.
fn state_dir(ctl: &runs::Controller, topology: &Topology) -> Result<StateDir, ControllerError> {
    StateDir::resolve(Some(&ctl.dir), topology.project_name()).map_err(ControllerError::StateDir)
}

/// The invocation of `command_line` on `topology`, its progress to `events`.
fn invocation<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    ctl: &runs::Controller,
    topology: Arc<Topology>,
    command_line: String,
    events: Arc<dyn Fn(Event) + Send + Sync>,
) -> Result<Invocation, ControllerError> {
    let dir = state_dir(ctl, &topology)?;
    Ok(Invocation {
        fleet: queue::fleet(state, &topology),
        host_timeout: ctl.host_timeout,
        cancel: flotilla_exec::CancellationToken::new(),
        state: dir,
        base_dir: ctl.dir.clone(),
        ready_timeout: ctl.ready_timeout,
        command_line,
        events,
        show_plan: Box::new(|_| {}),
        topology,
    })
}

/// What the journal and the lock say ran this: `flotilla serve (operator NAME): flotilla start a`.
fn command_line(by: &str, op: &Operation, typed: &str) -> String {
    format!("flotilla serve (dashboard, {by}): {}", op.typed_as(typed))
}

/// Plans `op` (`typed`: the verb as a person would type it, `up` for a stack's
/// start) on the selected revision for `by`, and keeps a plan for confirmation.
/// Changes nothing.
///
/// # Errors
/// [`ControllerError`]: off, no revision, the journal.
pub async fn propose<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    op: &Operation,
    typed: &str,
    by: &str,
) -> Result<Proposed, ControllerError> {
    let ctl = state.controller.as_ref().ok_or(ControllerError::Off)?;
    let current = state.current().ok_or(ControllerError::NoRevision)?;
    let topology = Arc::clone(&current.topology);
    let inv = invocation(
        state,
        ctl,
        Arc::clone(&topology),
        command_line(by, op, typed),
        Arc::new(|_| {}),
    )?;
    let plan = match run_blocking(inv, Some(op.clone()), None, true).await? {
        InvocationOutcome::Planned(plan) => plan,
        InvocationOutcome::Refused(r) => return Ok(Proposed::Refused(r)),
        InvocationOutcome::Applied { .. } => unreachable!("a dry run applies nothing"),
    };
    let outside: Vec<(String, String, String)> = plan
        .steps()
        .filter(|s| !s.action.leaves_processes())
        .filter_map(|s| {
            let host = topology.hosts.get(&s.host)?;
            (host.transport != TransportKind::Agent).then(|| {
                (
                    s.component.clone(),
                    s.host.clone(),
                    host.transport.as_str().to_string(),
                )
            })
        })
        .collect();
    if !outside.is_empty() {
        return Ok(Proposed::NotDriven { plan, outside });
    }
    let p = Proposal::new(plan, typed, &current.selection.digest, by, now_ms());
    ctl.keep(p.clone());
    Ok(Proposed::Plan(p))
}

/// The proposal `id`, if it is still waiting for confirmation.
pub fn proposal<S: AuthorityStore>(state: &AppState<S>, id: &str) -> Option<Proposal> {
    state.controller.as_ref()?.proposal(id)
}

/// Applies the plan kept under `id`, confirmed by `by`, in a background task (not
/// tied to the caller); the run, whose lines and outcome follow as it goes.
///
/// # Errors
/// [`ControllerError::Off`], [`ControllerError::UnknownPlan`] (applied already,
/// expired, never made), [`ControllerError::NoRevision`].
pub fn confirm<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: &str,
    by: &str,
) -> Result<Arc<Run>, ControllerError> {
    let ctl = state.controller.as_ref().ok_or(ControllerError::Off)?;
    let current = state.current().ok_or(ControllerError::NoRevision)?;
    let proposal = ctl.take(id).ok_or(ControllerError::UnknownPlan)?;
    let run = ctl.begin(proposal, by, now_ms());
    let sink = Arc::clone(&run);
    let pages = Arc::clone(state);
    // Pages showing operations follow the fleet's topic: an operation changes it.
    let events: Arc<dyn Fn(Event) + Send + Sync> = Arc::new(move |e| {
        if let Some(line) = flotilla_exec::progress::line(&e) {
            sink.push(line);
            pages.ui.hub.changed(Topic::Fleet);
        }
    });
    state.ui.hub.changed(Topic::Fleet);
    // The plan is checked against the revision selected now: another one selected
    // since is the CLI's "the inventory changed" refusal.
    let inv = invocation(
        state,
        ctl,
        current.topology,
        command_line(by, &run.proposal.plan.operation, &run.proposal.typed),
        events,
    );
    let plan = run.proposal.plan.clone();
    let task_run = Arc::clone(&run);
    let changed = ctl.changed.clone();
    let pages = Arc::clone(state);
    tokio::spawn(async move {
        let outcome = match inv {
            Err(e) => RunOutcome::Failed(causes(&e)),
            Ok(inv) => outcome_of(run_blocking(inv, None, Some(plan), false).await),
        };
        task_run.finish(outcome);
        changed.send_modify(|n| *n += 1);
        pages.ui.hub.changed(Topic::Fleet);
    });
    Ok(run)
}

/// `inv.run(op, given, dry_run)` on a thread of its own (the invocation holds the
/// journal's connection across its awaits, so its future cannot move between the
/// runtime's threads), driven by this runtime's timers and IO.
async fn run_blocking(
    inv: Invocation,
    op: Option<Operation>,
    given: Option<Plan>,
    dry_run: bool,
) -> Result<InvocationOutcome, OperateError> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || handle.block_on(inv.run(op.as_ref(), given, dry_run)))
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// How an invocation's result reads on a page.
fn outcome_of(result: Result<InvocationOutcome, OperateError>) -> RunOutcome {
    match result {
        Err(OperateError::StalePlan(why)) => RunOutcome::Refused(format!("stale plan: {why}")),
        Err(OperateError::Locked(e)) => RunOutcome::Refused(e.to_string()),
        Err(e) => RunOutcome::Failed(causes(&e)),
        Ok(InvocationOutcome::Refused(r)) => RunOutcome::Refused(r.to_string()),
        Ok(InvocationOutcome::Planned(_)) => RunOutcome::Failed("planned only".into()),
        Ok(InvocationOutcome::Applied {
            report, operation, ..
        }) => {
            let mut summary = Vec::new();
            if let Some(f) = &report.failed {
                summary.push(format!("failed at `{}`: {}", f.component, f.summary));
                for c in &report.cleanup {
                    summary.push(format!("cleaned up {}: {}", c.component, c.summary));
                }
            }
            RunOutcome::Applied {
                operation,
                succeeded: report.succeeded(),
                summary,
            }
        }
    }
}

/// An error and its causes, `: `-separated (how a page shows an error).
pub fn causes(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(c) = next {
        out.push_str(": ");
        out.push_str(&c.to_string());
        next = c.source();
    }
    out
}
