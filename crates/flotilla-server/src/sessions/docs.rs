//! The documents stored per session and per question (JSON in the store) and the
//! session state derived from them.

use flotilla_sessions::Mode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A session as stored (JSON in the store's `sessions.doc`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionDoc {
    /// The repository (a name from `sessions.toml`).
    pub repo: String,
    /// Where its runtime runs (`local`: the authority's host).
    pub host: String,
    /// The launch mode (never changed after creation).
    #[schema(value_type = String)]
    pub mode: Mode,
    /// Who created it (an operator, or `alertmanager`).
    pub created_by: String,
    /// Claude Code's session id (a UUID), resumed by every later runtime.
    pub agent_session: String,
    /// The first message, if given at creation.
    #[serde(default)]
    pub prompt: Option<String>,
    /// The session's tree, once made.
    #[serde(default)]
    pub tree: Option<String>,
    /// The commit the tree started from.
    #[serde(default)]
    pub base_commit: Option<String>,
    /// The runtime believed to run (reconciled against the process).
    #[serde(default)]
    pub runtime: Option<RuntimeRecord>,
    /// Runtimes booted so far.
    #[serde(default)]
    pub boots: u64,
    /// How the last runtime ended.
    #[serde(default)]
    pub last_end: Option<RuntimeEnd>,
    /// Messages not yet given to a runtime (they start the next turn).
    #[serde(default)]
    pub pending: Vec<String>,
    /// The permission mode the runtime reported in its last hook payload.
    #[serde(default)]
    pub observed_mode: Option<String>,
    /// The alert that opened it (its deduplication key).
    #[serde(default)]
    pub alert: Option<String>,
    /// A question was answered while the runtime that asked it was still ending:
    /// the next runtime resumes the conversation when it ends.
    #[serde(default)]
    pub resume_after: bool,
    /// Messages wait because `max_runtimes` runtimes run (the reconciler boots
    /// it when one ends).
    #[serde(default)]
    pub waiting_for_capacity: bool,
    /// The hash of the credential of the runtime that runs (`None` without one):
    /// a session credential is honoured only while it is this one and its
    /// runtime runs.
    #[serde(default)]
    pub token_hash: Option<String>,
    /// The uid (and gid) its runtimes run as, its own: allocated at its first boot
    /// from `[runtime] uids`.
    #[serde(default)]
    pub uid: Option<u32>,
}

/// A runtime's process.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct RuntimeRecord {
    /// Its pid (bwrap's).
    pub pid: u32,
    /// Its start time, clock ticks since boot (with the pid, its identity).
    pub start_ticks: u64,
    /// When it was booted, ms since the Unix epoch.
    pub booted_ms: i64,
    /// Its number (1, 2, 3…).
    pub boot: u64,
}

/// How a runtime ended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct RuntimeEnd {
    /// When, ms since the Unix epoch (when it was noticed).
    pub at_ms: i64,
    /// Its exit code, when it was reaped here.
    pub code: Option<i32>,
    /// `exited`, `gone` (found not running), `idle` or `stopped` (torn down).
    pub how: String,
    /// Why, when it failed: the end of what it wrote to stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A session's state, derived from facts (never stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SessionState {
    /// No message yet.
    New,
    /// A runtime runs.
    Working,
    /// A question is open: the turn is parked until it is answered.
    WaitingForAnswer,
    /// No runtime; the last turn ended (the next message boots one).
    Idle,
    /// No runtime; the last one did not end well (non-zero exit, or gone).
    Failed,
}

/// The state of a session from its facts: a live runtime wins (`Working`), then an
/// open question, then how the last runtime ended.
pub fn derive_state(doc: &SessionDoc, runtime_alive: bool, open_questions: usize) -> SessionState {
    if runtime_alive {
        SessionState::Working
    } else if open_questions > 0 {
        SessionState::WaitingForAnswer
    } else {
        match &doc.last_end {
            None => SessionState::New,
            Some(RuntimeEnd { code: Some(0), .. }) => SessionState::Idle,
            Some(RuntimeEnd { how, .. }) if how == "idle" || how == "stopped" => SessionState::Idle,
            Some(_) => SessionState::Failed,
        }
    }
}

/// A question as stored.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuestionDoc {
    /// The tool (`Bash`, `Edit`…, or `Executor` for an executor call).
    pub tool_name: String,
    /// Its exact input.
    #[schema(value_type = Object)]
    pub tool_input: serde_json::Value,
    /// Why the gate asked.
    pub reason: String,
    /// The answer, once given.
    #[serde(default)]
    pub answer: Option<AnswerDoc>,
    /// Whether the answer was applied (to the one call it answers).
    #[serde(default)]
    pub used: bool,
    /// What the authority itself did once it was answered (a push: git's summary
    /// line, or why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// A human's answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AnswerDoc {
    /// `allow` or `deny`.
    pub decision: String,
    /// A note for the agent.
    #[serde(default)]
    pub note: Option<String>,
    /// Who answered.
    pub by: String,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
}

pub(crate) fn alive(r: &RuntimeRecord) -> bool {
    flotilla_exec::process_start_ticks(r.pid) == Some(r.start_ticks)
}
