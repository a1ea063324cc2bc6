//! Status and observation types (DESIGN.md's status model): every signal as a typed
//! value, each with its [`Evidence`]. The model only defines them; probes and adapters
//! (in `flotilla-exec`) fill them in, the planner takes an [`Observed`] snapshot as an
//! argument, and the CLI, the authority and agents exchange [`StatusReport`]s — none of
//! them needs tokio, SSH or HTTP to read one.
//!
//! - Signals: [`Lifecycle`], [`DesiredLifecycle`], [`Health`], [`Condition`],
//!   [`Observability`], [`Ownership`], config identity ([`ConfigIdentity`]) and runtime
//!   identity ([`RuntimeIdentity`] measured, [`RuntimeStatus`] with what is on disk,
//!   [`ProgramFile`] for an interpreter's script).
//! - [`ComponentStatus`]: all signals of one component, with evidence; [`StackStatus`]:
//!   a stack's route health; [`StatusReport`]: a whole observation.
//! - [`Observed`] / [`ObservedComponent`]: the planner's view.

use crate::inventory::AdapterKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Is it running?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Lifecycle {
    /// Running.
    Running,
    /// Not running.
    #[default]
    Stopped,
    /// Being started.
    Starting,
    /// Being stopped.
    Stopping,
    /// Its last start failed or it exited with an error.
    Failed,
    /// Not known (e.g. its host cannot be reached).
    Unknown,
}

impl Lifecycle {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Running => "running",
            Lifecycle::Stopped => "stopped",
            Lifecycle::Starting => "starting",
            Lifecycle::Stopping => "stopping",
            Lifecycle::Failed => "failed",
            Lifecycle::Unknown => "unknown",
        }
    }
}

/// Is that intended?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DesiredLifecycle {
    /// It should run.
    Running,
    /// It should not run.
    #[default]
    Stopped,
    /// It must not be started.
    Disabled,
}

/// Does its readiness contract pass?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Health {
    /// The readiness probe passes.
    Healthy,
    /// Passing, with warnings.
    Degraded,
    /// The readiness probe fails.
    Unhealthy,
    /// Not probed yet, or cannot be.
    #[default]
    Unknown,
    /// Not applicable (not running, or no probe declared).
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl Health {
    /// The name as serialised (`n/a` for not applicable).
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "healthy",
            Health::Degraded => "degraded",
            Health::Unhealthy => "unhealthy",
            Health::Unknown => "unknown",
            Health::NotApplicable => "n/a",
        }
    }
}

/// Can we see it from here?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Observability {
    /// Observed now.
    #[default]
    Observed,
    /// Its host cannot be reached; the rest is last-known state.
    Unreachable,
    /// We may not look.
    NotPermitted,
    /// This version cannot observe it (e.g. a host without a supported transport).
    Unsupported,
    /// Nothing was observed of it: it is absent from the observation.
    Unobserved,
}

impl Observability {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Observability::Observed => "observed",
            Observability::Unreachable => "unreachable",
            Observability::NotPermitted => "not-permitted",
            Observability::Unsupported => "unsupported",
            Observability::Unobserved => "unobserved",
        }
    }
}

/// Is something wrong beyond health?
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Condition {
    /// Nothing beyond what health says.
    #[default]
    Ok,
    /// Its effective config changed since it started (a restart applies it).
    Drift,
    /// The executable on disk is not the one running (replaced binary).
    StaleRuntime,
    /// It stopped without being asked to.
    DownUnexpectedly,
    /// Needs a human: e.g. a foreign process holds its port.
    Attention,
    /// It could not be observed properly.
    Error,
}

impl Condition {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Ok => "ok",
            Condition::Drift => "drift",
            Condition::StaleRuntime => "stale-runtime",
            Condition::DownUnexpectedly => "down-unexpectedly",
            Condition::Attention => "attention",
            Condition::Error => "error",
        }
    }
}

/// Who started the running instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StartedBy {
    /// Nobody: it is not running, or it is external.
    #[default]
    Nobody,
    /// A Flotilla operation.
    Flotilla {
        /// The operation's id.
        operation: String,
    },
    /// Something else (found running, not adopted).
    Foreign {
        /// What was seen, e.g. `pid 4242 (python3 -m http.server)`.
        evidence: String,
    },
}

/// What is observed of one component.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObservedComponent {
    /// Readiness.
    #[serde(default)]
    pub health: Health,
    /// Running or not.
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// Whether we can see it.
    #[serde(default)]
    pub observability: Observability,
    /// Who started it.
    #[serde(default)]
    pub started_by: StartedBy,
    /// When it runs with another effective config than the one selected now: what
    /// changed, key by key (`command[2] "18752" → "18755"`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_changes: Vec<String>,
    /// When the owner of its lifecycle (systemd, launchd…) could not be asked: why
    /// (`systemd is not the init system here…`). Its lifecycle is then unknown, and
    /// no wait makes it known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_error: Option<String>,
    /// When it could not be seen: what its host, or the way to it, said — e.g. an
    /// agent's own refusal (`secrets file … has mode 0644 …`), verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unobserved_why: Option<String>,
}

impl ObservedComponent {
    /// Not running, observed, started by nobody.
    pub const STOPPED: ObservedComponent = ObservedComponent {
        lifecycle: Lifecycle::Stopped,
        health: Health::NotApplicable,
        observability: Observability::Observed,
        started_by: StartedBy::Nobody,
        config_changes: Vec::new(),
        owner_error: None,
        unobserved_why: None,
    };

    /// Absent from an observation: nothing is known of it.
    pub const UNKNOWN: ObservedComponent = ObservedComponent {
        lifecycle: Lifecycle::Unknown,
        health: Health::Unknown,
        observability: Observability::Unobserved,
        started_by: StartedBy::Nobody,
        config_changes: Vec::new(),
        owner_error: None,
        unobserved_why: None,
    };

    /// Running and its readiness passes (or it has no readiness contract).
    pub fn is_ready(&self) -> bool {
        self.lifecycle == Lifecycle::Running
            && matches!(
                self.health,
                Health::Healthy | Health::Degraded | Health::NotApplicable
            )
    }

    /// Running, starting or stopping: a process exists.
    pub fn is_up(&self) -> bool {
        matches!(
            self.lifecycle,
            Lifecycle::Running | Lifecycle::Starting | Lifecycle::Stopping
        )
    }
}

/// What was recorded when a stack was last brought up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StackRecord {
    /// Components in the order they were started (dependencies included).
    pub start_order: Vec<String>,
}

/// What an absent component is observed as (a `static`, so it can be lent out).
static UNKNOWN_COMPONENT: ObservedComponent = ObservedComponent::UNKNOWN;

/// The observed state the planner plans against. A component absent from
/// `components` is unknown ([`ObservedComponent::UNKNOWN`]): never taken for stopped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Observed {
    /// Per component.
    #[serde(default)]
    pub components: BTreeMap<String, ObservedComponent>,
    /// Per stack that was brought up.
    #[serde(default)]
    pub stacks: BTreeMap<String, StackRecord>,
}

impl Observed {
    /// What is observed of `name` ([`ObservedComponent::UNKNOWN`] when it is absent).
    pub fn component(&self, name: &str) -> &ObservedComponent {
        self.components.get(name).unwrap_or(&UNKNOWN_COMPONENT)
    }

    /// `sha256:` digest of the canonical JSON of this snapshot.
    pub fn digest(&self) -> String {
        crate::digest::digest_of(self)
    }
}

/// The suffix Linux appends to `/proc/<pid>/exe` when the file was deleted or
/// replaced (renamed over) after the process started.
pub const DELETED_SUFFIX: &str = " (deleted)";

/// What a running process is, measured.
///
/// Serialised with snake_case field names, e.g.
/// `{"pid":4242,"pgid":4242,"start_time_ticks":987654,"exe":"/usr/bin/python3.11",
/// "exe_sha256":"sha256:…","argv_digest":"sha256:…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub struct RuntimeIdentity {
    /// Process id.
    pub pid: u32,
    /// Process group id (equal to `pid` for a process Flotilla starts itself, which
    /// makes it a session and group leader).
    pub pgid: i32,
    /// Start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`; divide
    /// by `sysconf(_SC_CLK_TCK)`, usually 100, for seconds). Never changes for a
    /// process, and differs for a later process reusing the pid.
    pub start_time_ticks: u64,
    /// Executable path as the kernel reports it (`readlink /proc/<pid>/exe`). Ends in
    /// [`DELETED_SUFFIX`] when the file was replaced or deleted after the process
    /// started; see [`RuntimeIdentity::exe_on_disk`]. For a `#!` script this is
    /// the interpreter.
    pub exe: PathBuf,
    /// `sha256:<64 hex>` of the executable image actually running (read through
    /// `/proc/<pid>/exe`, not from the path on disk).
    pub exe_sha256: String,
    /// `sha256:<64 hex>` of argv joined with NUL bytes (no trailing NUL); see
    /// `flotilla_exec::identity::argv_digest`.
    pub argv_digest: String,
}

impl RuntimeIdentity {
    /// What it is, in words: `pid 4242`; for an instance that is no process here
    /// (pid 0: a cluster's pods) its `exe` with the ids after `#` cut to 8
    /// characters, e.g. `kubernetes://inference/deployment/llm#8d31e258,df705329`.
    pub fn instance(&self) -> String {
        if self.pid > 0 {
            return format!("pid {}", self.pid);
        }
        let exe = self.exe.display().to_string();
        match exe.split_once('#') {
            Some((base, ids)) => {
                let short: Vec<&str> = ids.split(',').map(|i| i.get(..8).unwrap_or(i)).collect();
                format!("{base}#{}", short.join(","))
            }
            None => exe,
        }
    }

    /// The executable's path without a trailing [`DELETED_SUFFIX`]: where the
    /// binary was loaded from.
    pub fn exe_on_disk(&self) -> &Path {
        strip_deleted(&self.exe)
    }

    /// Whether the kernel reports the executable as deleted or replaced since start.
    pub fn exe_replaced(&self) -> bool {
        self.exe
            .as_os_str()
            .as_bytes()
            .ends_with(DELETED_SUFFIX.as_bytes())
    }
}

/// A file that is part of what a process runs besides its executable: the script or
/// module an interpreter (`python3`, `node`, `bash`…) was started on. Its digest is
/// taken when the process starts, so a later edit on disk shows as `stale-runtime`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProgramFile {
    /// Absolute path (resolved against the process's working directory).
    pub path: PathBuf,
    /// Why it belongs to the identity: `script` (the interpreter's program argument)
    /// or `module <name>` (`python -m <name>`).
    pub role: String,
    /// `sha256:<64 hex>` of the file when the process started (`None`: unreadable).
    pub sha256: Option<String>,
}

/// `p` without a trailing [`DELETED_SUFFIX`].
pub fn strip_deleted(p: &Path) -> &Path {
    let b = p.as_os_str().as_bytes();
    match b.strip_suffix(DELETED_SUFFIX.as_bytes()) {
        Some(s) => Path::new(OsStr::from_bytes(s)),
        None => p,
    }
}

/// Who owns a component's lifecycle.
///
/// Serialised as the words `status` shows: `managed (process)`, `managed (systemd)`,
/// `external`, `orphaned` (a running instance of a component no longer in the
/// inventory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ownership {
    /// Flotilla starts and stops it through this adapter.
    Managed(AdapterKind),
    /// Observed only.
    External,
    /// Started by Flotilla for a component the inventory no longer declares.
    Orphaned,
}

impl Ownership {
    /// Of a component with this owner and adapter.
    pub fn of(owner: crate::inventory::Owner, adapter: Option<AdapterKind>) -> Ownership {
        match owner {
            crate::inventory::Owner::External => Ownership::External,
            crate::inventory::Owner::Managed => Ownership::Managed(adapter.unwrap_or_default()),
        }
    }
}

impl std::fmt::Display for Ownership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ownership::Managed(a) => write!(f, "managed ({})", a.as_str()),
            Ownership::External => f.write_str("external"),
            Ownership::Orphaned => f.write_str("orphaned"),
        }
    }
}

impl std::str::FromStr for Ownership {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "external" => return Ok(Ownership::External),
            "orphaned" => return Ok(Ownership::Orphaned),
            _ => {}
        }
        let adapter = s
            .strip_prefix("managed (")
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| format!("not an ownership: `{s}`"))?;
        serde_json::from_value(serde_json::Value::String(adapter.into()))
            .map(Ownership::Managed)
            .map_err(|_| format!("unknown adapter in `{s}`"))
    }
}

impl Serialize for Ownership {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Ownership {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Which status signal a piece of evidence supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// [`Lifecycle`].
    Lifecycle,
    /// [`Health`].
    Health,
    /// [`Condition`].
    Condition,
    /// [`Observability`].
    Observability,
    /// [`ConfigIdentity`].
    ConfigIdentity,
    /// [`RuntimeIdentity`].
    RuntimeIdentity,
}

/// One piece of evidence: which signal, from what, when, what it saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The status signal it supports.
    pub signal: Signal,
    /// Where it comes from (`/proc/4242`, `readiness probe`, `journal`…).
    pub source: String,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// What was seen.
    pub saw: String,
}

/// Config identity: the digest selected now vs the one the instance was started with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConfigIdentity {
    /// Digest of the effective config in the inventory now.
    pub selected: String,
    /// Digest recorded when the running instance started (`None`: not running).
    pub running: Option<String>,
}

/// Runtime identity: what runs, measured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// The measured identity of the running process.
    pub measured: RuntimeIdentity,
    /// Digest of the executable now on disk at its path (`None`: file gone).
    pub on_disk_sha256: Option<String>,
    /// When it was started, ms since the Unix epoch (from the journal).
    pub started_at_ms: i64,
    /// The operation that started it.
    pub started_by_operation: String,
    /// The release selected for it, when its program comes from a release's install
    /// root and a rollout updated it (filled by the authority; `None` elsewhere):
    /// `measured.exe_sha256` is compared with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<SelectedRelease>,
}

/// A release selected for a component or an agent by a rollout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelectedRelease {
    /// The release's name (`llama-server`).
    pub name: String,
    /// Its version.
    pub version: String,
    /// The artifact's SHA-256 for the host's platform (64 hex digits).
    pub sha256: String,
    /// The rollout that selected it.
    pub rollout: u64,
}

impl RuntimeStatus {
    /// Whether the measured executable is the selected release's artifact (`None`:
    /// no release selected).
    pub fn runs_release(&self) -> Option<bool> {
        self.release.as_ref().map(|r| {
            self.measured
                .exe_sha256
                .strip_prefix("sha256:")
                .unwrap_or(&self.measured.exe_sha256)
                == r.sha256
        })
    }
}

/// What was last seen of a component on a host that cannot be reached now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastKnown {
    /// Lifecycle seen then.
    pub lifecycle: Lifecycle,
    /// Health seen then.
    pub health: Health,
    /// Condition seen then.
    pub condition: Condition,
    /// When it was seen, ms since the Unix epoch.
    pub observed_at_ms: i64,
}

/// Everything known about one component, each signal with its evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ComponentStatus {
    /// Name.
    pub name: String,
    /// Host.
    pub host: String,
    /// Is it running?
    pub lifecycle: Lifecycle,
    /// Is that intended? (`None` for external components.)
    pub desired: Option<DesiredLifecycle>,
    /// Does its readiness contract pass?
    pub health: Health,
    /// Is something wrong beyond health?
    pub condition: Condition,
    /// Can we see it from here?
    pub observability: Observability,
    /// Who owns its lifecycle.
    pub ownership: Ownership,
    /// Who started the running instance.
    pub started_by: StartedBy,
    /// Selected vs running config digest.
    pub config_identity: ConfigIdentity,
    /// Measured runtime identity, when running under Flotilla.
    pub runtime_identity: Option<RuntimeStatus>,
    /// When it drifted: what changed since it started, key by key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub config_changes: Vec<String>,
    /// When the owner of its lifecycle could not be asked: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_error: Option<String>,
    /// How many times its supervisor restarted it: systemd's `NRestarts`, launchd's
    /// runs after the first, or the agent's supervised restarts since the last other
    /// operation on it (from the journal). `None` when nothing supervises it or it
    /// was never restarted by the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u64>,
    /// The ports of the endpoints the running instance was started with, when they
    /// differ from the inventory's (it was edited since): what it really listens
    /// on until it is restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_ports: Option<Vec<u16>>,
    /// The evidence for the signals above.
    pub evidence: Vec<Evidence>,
    /// When its host cannot be reached: what was last seen there, and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known: Option<LastKnown>,
}

impl ComponentStatus {
    /// As desired and healthy: what `status` exits 0 for.
    pub fn is_ok(&self) -> bool {
        let healthy = matches!(
            self.health,
            Health::Healthy | Health::Degraded | Health::NotApplicable
        );
        let as_desired = match self.desired {
            Some(DesiredLifecycle::Running) => self.lifecycle == Lifecycle::Running,
            Some(DesiredLifecycle::Stopped | DesiredLifecycle::Disabled) => {
                self.lifecycle != Lifecycle::Running
            }
            None => true,
        };
        self.condition == Condition::Ok
            && healthy
            && as_desired
            && self.observability == Observability::Observed
    }
}

/// Whether a stack's routes answer end to end, now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackStatus {
    /// The stack.
    pub name: String,
    /// `healthy` when every readiness probe of the stack passes, `unhealthy` when
    /// one fails, `n/a` when it declares none or not every member runs.
    pub health: Health,
    /// Each probe's outcome, or why none ran.
    pub evidence: Vec<Evidence>,
}

/// An operation that began but has not finished (still running, or interrupted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnfinishedOperation {
    /// Its id in the journal (`op-42`).
    pub id: String,
    /// `start`, `stop`, `restart`.
    pub verb: String,
    /// The component or stack.
    pub target: String,
    /// `user@host` that ran it.
    pub who: String,
    /// The pid of the invocation.
    pub pid: u32,
    /// Its command line.
    pub command_line: String,
    /// When it began, ms since the Unix epoch.
    pub started_at_ms: i64,
}

/// The status of a set of components, observed now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// When observation began, ms since the Unix epoch.
    pub observed_at_ms: i64,
    /// Per component, in dependency order.
    pub components: Vec<ComponentStatus>,
    /// Operations begun but never finished whose process is gone (e.g. killed).
    pub interrupted: Vec<UnfinishedOperation>,
    /// Operations still running (another invocation holds the lock).
    pub in_progress: Vec<UnfinishedOperation>,
    /// The route health of each stack whose members were observed: its own
    /// readiness probes (end to end), run now.
    #[serde(default)]
    pub stacks: Vec<StackStatus>,
}

impl StatusReport {
    /// Every component as desired and healthy, and no stack route failing.
    pub fn all_ok(&self) -> bool {
        self.components.iter().all(ComponentStatus::is_ok)
            && self.stacks.iter().all(|s| s.health != Health::Unhealthy)
    }

    /// The planner's view of this report.
    pub fn observed(&self, stacks: BTreeMap<String, StackRecord>) -> Observed {
        Observed {
            components: self
                .components
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        ObservedComponent {
                            lifecycle: c.lifecycle,
                            health: c.health,
                            observability: c.observability,
                            started_by: c.started_by.clone(),
                            config_changes: c.config_changes.clone(),
                            owner_error: c.owner_error.clone(),
                            unobserved_why: (c.observability != Observability::Observed)
                                .then(|| {
                                    c.evidence
                                        .iter()
                                        .find(|e| e.signal == Signal::Observability)
                                        .map(|e| e.saw.clone())
                                })
                                .flatten(),
                        },
                    )
                })
                .collect(),
            stacks,
        }
    }
}
