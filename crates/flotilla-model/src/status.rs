//! Status and observation types (DESIGN.md's status model). The model only defines
//! them; probes and adapters (in `flotilla-exec`) fill them in, and the planner takes
//! an [`Observed`] snapshot as an argument.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
}

impl ObservedComponent {
    /// Not running, observed, started by nobody.
    pub const STOPPED: ObservedComponent = ObservedComponent {
        lifecycle: Lifecycle::Stopped,
        health: Health::NotApplicable,
        observability: Observability::Observed,
        started_by: StartedBy::Nobody,
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

/// The observed state the planner plans against. Components absent from `components`
/// count as stopped, observed, started by nobody.
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
    /// What is observed of `name` ([`ObservedComponent::STOPPED`] when nothing is).
    pub fn component(&self, name: &str) -> &ObservedComponent {
        self.components
            .get(name)
            .unwrap_or(&ObservedComponent::STOPPED)
    }

    /// `sha256:` digest of the canonical JSON of this snapshot.
    pub fn digest(&self) -> String {
        crate::digest::digest_of(self)
    }
}
