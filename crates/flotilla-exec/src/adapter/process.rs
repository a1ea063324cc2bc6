//! The `process` adapter: the component is a detached child of Flotilla in its own
//! session and process group ([`crate::process::start`]); stop signals the whole
//! group after checking its identity ([`crate::process::stop`]). It keeps no state
//! of its own: the journal's instance record is the truth, and the observer measures it.

use super::{Adapter, Launch, Launched, Stopped};
use crate::error::ExecError;
use crate::identity::RuntimeIdentity;
use crate::process::{self as proc_, ProcessSpec, StopOutcome};
use flotilla_model::inventory::AdapterKind;
use flotilla_model::topology::Component;
use flotilla_store::InstanceRecord;

/// The `process` adapter.
#[derive(Debug, Clone, Copy, Default)]
pub struct Process;

/// Starts `launch` as a detached process group (shared by the process-family adapters).
pub(crate) fn start_process(launch: &Launch) -> Result<Launched, ExecError> {
    let (program, args) = launch
        .argv
        .split_first()
        .ok_or_else(|| ExecError::Adapter {
            component: launch.component.name.clone(),
            message: "has no command".into(),
        })?;
    let spec = ProcessSpec {
        component: launch.component.name.clone(),
        program: program.clone(),
        args: args.to_vec(),
        env: launch.env.clone(),
        inherit_env: false,
        cwd: launch.cwd.clone(),
        log_path: launch.log_path.clone(),
        log_max_bytes: launch.log_max_bytes,
        log_keep: launch.log_keep,
        start_note: launch.start_note.clone(),
    };
    let started = proc_::start(&spec)?;
    Ok(Launched {
        identity: started.identity,
        log_start_offset: started.log_start_offset,
        child: Some(started.child),
        start_marked: started.start_marked,
        facts: serde_json::json!({ "program": started.program }),
    })
}

/// Stops the recorded process group of `c`, identity first.
pub(crate) fn stop_process(
    c: &Component,
    recorded: Option<&InstanceRecord>,
) -> Result<Stopped, ExecError> {
    let Some(rec) = recorded else {
        return Ok(Stopped::AlreadyGone {
            summary: format!("`{}` was not running (no instance recorded)", c.name),
        });
    };
    let identity = RuntimeIdentity::from(rec);
    let (signal, grace) = super::stop_settings(c);
    let outcome = proc_::stop(&identity, &signal, grace)?;
    let facts = serde_json::to_value(&outcome).unwrap_or_default();
    Ok(match outcome {
        StopOutcome::Stopped {
            signal,
            escalated_to_kill,
            took,
        } => Stopped::Stopped {
            summary: format!(
                "stopped pid {} with {signal}{} in {} ms",
                rec.pid,
                if escalated_to_kill {
                    ", then SIGKILL after the grace period"
                } else {
                    ""
                },
                took.as_millis()
            ),
            facts,
        },
        StopOutcome::AlreadyGone { .. } => Stopped::AlreadyGone {
            summary: format!("pid {} had already exited", rec.pid),
        },
        StopOutcome::IdentityMismatch { why, .. } => Stopped::NotOurs { why, facts },
    })
}

impl Adapter for Process {
    fn kind(&self) -> Option<AdapterKind> {
        Some(AdapterKind::Process)
    }

    fn start(&self, launch: &Launch) -> Result<Launched, ExecError> {
        start_process(launch)
    }

    fn stop(
        &self,
        _project: &str,
        c: &Component,
        recorded: Option<&InstanceRecord>,
    ) -> Result<Stopped, ExecError> {
        stop_process(c, recorded)
    }
}
