//! The record types the store reads and writes: what goes in ([`NewOperation`],
//! [`NewStep`], [`InstanceRecord`]) and what comes out ([`OperationRecord`],
//! [`StepRecord`], [`InstanceRecord`], [`RemovedInstance`]), and the small enums
//! stored as kebab-case text ([`Outcome`], [`RemovalReason`]).
//!
//! Every record derives `Serialize` (for `--json` output) with stable snake_case
//! field names; ids serialise as their printed form (`"op-12"`, `"step-3"`);
//! timestamps are `i64` milliseconds since the Unix epoch, as passed in by the
//! caller; absent values serialise as `null` (the field is always present).

use crate::error::StoreError;
use crate::ids::{OperationId, StepId};
pub use crate::outcome::{Outcome, ParseEnumError, RemovalReason};
use serde::{Deserialize, Serialize};

/// An operation about to run, as written by
/// [`Store::begin_operation`](crate::Store::begin_operation) before its first step.
///
/// Callers must not put secrets in any field (DESIGN.md invariant 9): the journal
/// is plain text on disk and is shown by `--json` output. `command_line` in
/// particular must be the command as typed, never with resolved secret values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewOperation {
    /// `start`, `stop` or `restart` (`up`/`down` are start/stop of a stack).
    pub verb: String,
    /// The component or stack operated on.
    pub target: String,
    /// Flags that changed the operation's meaning, in CLI spelling (`--force`,
    /// `--cascade`, …).
    pub flags: Vec<String>,
    /// `sha256:` digest of the plan being applied.
    pub plan_digest: String,
    /// `sha256:` digest of the topology the plan was computed from.
    pub topology_digest: String,
    /// The plan, as JSON text (kept whole; read back with
    /// [`Store::operation_plan`](crate::Store::operation_plan)).
    pub plan_json: String,
    /// Who ran it: `user@hostname`.
    pub who: String,
    /// Process id of the invoking process (lets a later invocation tell an
    /// operation still running from one interrupted).
    pub pid: u32,
    /// The command line as typed (no secrets).
    pub command_line: String,
    /// When it began, in milliseconds since the Unix epoch.
    pub started_at_ms: i64,
}

impl NewOperation {
    /// Fills the plan-derived fields from `plan`: verb, target, flags (`--force`,
    /// `--cascade` as set in the plan's operation; push more if needed), both
    /// digests and the plan's JSON.
    ///
    /// # Errors
    /// [`StoreError::Json`] if the plan cannot be serialised (it always can in
    /// practice).
    pub fn from_plan(
        plan: &flotilla_plan::Plan,
        who: impl Into<String>,
        pid: u32,
        command_line: impl Into<String>,
        started_at_ms: i64,
    ) -> Result<NewOperation, StoreError> {
        let plan_json = serde_json::to_string(plan).map_err(|source| StoreError::Json {
            what: "the plan",
            source,
        })?;
        let op = &plan.operation;
        let mut flags = Vec::new();
        if op.force {
            flags.push("--force".to_owned());
        }
        if op.cascade {
            flags.push("--cascade".to_owned());
        }
        Ok(NewOperation {
            verb: op.verb.to_string(),
            target: op.target.clone(),
            flags,
            plan_digest: plan.digest(),
            topology_digest: plan.topology_digest.clone(),
            plan_json,
            who: who.into(),
            pid,
            command_line: command_line.into(),
            started_at_ms,
        })
    }
}

/// A step about to run, as written by
/// [`Store::begin_step`](crate::Store::begin_step) before it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewStep {
    /// Index of its wave in the plan (0-based).
    pub wave: u32,
    /// The component it acts on.
    pub component: String,
    /// The plan's action, kebab-case (`start`, `stop`, `restart`, `await-ready`,
    /// `no-op`) or a cleanup action (e.g. `stop` during a rollback).
    pub action: String,
    /// When it began, in milliseconds since the Unix epoch.
    pub started_at_ms: i64,
}

/// An operation as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationRecord {
    /// Its id (serialised `"op-<n>"`).
    pub id: OperationId,
    /// See [`NewOperation::verb`].
    pub verb: String,
    /// See [`NewOperation::target`].
    pub target: String,
    /// See [`NewOperation::flags`].
    pub flags: Vec<String>,
    /// See [`NewOperation::plan_digest`].
    pub plan_digest: String,
    /// See [`NewOperation::topology_digest`].
    pub topology_digest: String,
    /// See [`NewOperation::who`].
    pub who: String,
    /// See [`NewOperation::pid`].
    pub pid: u32,
    /// See [`NewOperation::command_line`].
    pub command_line: String,
    /// When it began (ms since the Unix epoch).
    pub started_at_ms: i64,
    /// When it finished or was noticed interrupted (ms since the Unix epoch);
    /// `None` while [`Outcome::Running`].
    pub ended_at_ms: Option<i64>,
    /// How it ended, or [`Outcome::Running`].
    pub outcome: Outcome,
    /// Why it failed, when it did (one line, no secrets).
    pub error: Option<String>,
}

/// A step as journaled.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Its id (serialised `"step-<n>"`).
    pub id: StepId,
    /// The operation it belongs to.
    pub operation: OperationId,
    /// See [`NewStep::wave`].
    pub wave: u32,
    /// See [`NewStep::component`].
    pub component: String,
    /// See [`NewStep::action`].
    pub action: String,
    /// When it began (ms since the Unix epoch).
    pub started_at_ms: i64,
    /// When it finished (ms since the Unix epoch); `None` while running.
    pub ended_at_ms: Option<i64>,
    /// How it ended, or [`Outcome::Running`].
    pub outcome: Outcome,
    /// What was observed (probe results, measured identity…), as given to
    /// [`Store::finish_step`](crate::Store::finish_step); `null` until then.
    pub evidence: serde_json::Value,
}

/// A process Flotilla started and believes runs: one per component, with the
/// runtime identity measured when it started (DESIGN.md invariant 5: a pid is
/// signalled only if a fresh measurement matches this).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// Component name (the key: at most one instance per component).
    pub component: String,
    /// The host it runs on.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Process group id.
    pub pgid: i32,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22); with
    /// `pid`, names the process unambiguously. At most `i64::MAX`.
    pub start_time_ticks: u64,
    /// Executable path.
    pub exe: String,
    /// `sha256:` digest of the executable.
    pub exe_sha256: String,
    /// `sha256:` digest of the argv.
    pub argv_digest: String,
    /// `sha256:` digest of the component's config it was started with.
    pub config_digest: String,
    /// The operation that started it.
    pub operation: OperationId,
    /// When it was started (ms since the Unix epoch).
    pub started_at_ms: i64,
    /// Where its output goes.
    pub log_path: String,
    /// Canonical JSON of the effective runtime config it was started with
    /// (`Component::runtime_config`); `None` for instances recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_json: Option<String>,
    /// When the executable is an interpreter: the script or module it was started
    /// on, with its digest at start (empty otherwise, and for older records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub program_files: Vec<flotilla_model::status::ProgramFile>,
}

/// An instance record that was removed, kept as history.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RemovedInstance {
    /// The record as it was (its fields serialise inline, next to `reason` and
    /// `removed_at_ms`).
    #[serde(flatten)]
    pub instance: InstanceRecord,
    /// Why it was removed.
    pub reason: RemovalReason,
    /// When (ms since the Unix epoch).
    pub removed_at_ms: i64,
}

/// The identity the journal recorded for an instance (what a fresh measurement is
/// compared with before anything is signalled).
impl From<&InstanceRecord> for flotilla_model::status::RuntimeIdentity {
    fn from(r: &InstanceRecord) -> Self {
        flotilla_model::status::RuntimeIdentity {
            pid: r.pid,
            pgid: r.pgid,
            start_time_ticks: r.start_time_ticks,
            exe: std::path::PathBuf::from(&r.exe),
            exe_sha256: r.exe_sha256.clone(),
            argv_digest: r.argv_digest.clone(),
        }
    }
}

impl OperationRecord {
    /// This operation as status shows an unfinished one.
    pub fn unfinished(&self) -> flotilla_model::status::UnfinishedOperation {
        flotilla_model::status::UnfinishedOperation {
            id: self.id.to_string(),
            verb: self.verb.clone(),
            target: self.target.clone(),
            who: self.who.clone(),
            pid: self.pid,
            command_line: self.command_line.clone(),
            started_at_ms: self.started_at_ms,
        }
    }
}

/// The newest step that acted on a component (any action but `no-op`), with how its
/// operation ended: what status needs to say that the last operation on a component
/// failed, was interrupted, or is still starting it. Read for every component at once
/// by [`Store::last_steps`](crate::Store::last_steps).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastStep {
    /// The component (as journaled: `stack:<name>` for a stack's verification).
    pub component: String,
    /// The step.
    pub step: StepId,
    /// Its action (`start`, `stop`, `restart`, `await-ready`, `record-stopped`…).
    pub action: String,
    /// How the step ended, or [`Outcome::Running`].
    pub step_outcome: Outcome,
    /// When the step began (ms since the Unix epoch).
    pub step_started_at_ms: i64,
    /// The step's `summary` (from its evidence), when it has finished.
    pub step_summary: Option<String>,
    /// Its operation.
    pub operation: OperationId,
    /// The operation's command line as typed.
    pub command_line: String,
    /// The pid of the invocation that ran the operation.
    pub operation_pid: u32,
    /// How the operation ended, or [`Outcome::Running`] (it may have been interrupted
    /// without anyone noticing yet: the caller checks `operation_pid`).
    pub operation_outcome: Outcome,
    /// The operation's one-line error, when it failed.
    pub operation_error: Option<String>,
    /// The component of the operation's first failed or interrupted step, if any.
    pub failed_component: Option<String>,
    /// That step's `summary`.
    pub failed_summary: Option<String>,
}
