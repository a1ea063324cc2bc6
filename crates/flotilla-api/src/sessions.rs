//! The sessions' wire: sessions, questions, the executor, pushes, alerts and cleanup
//! on `/v1` (JSON, with their OpenAPI schemas), and the documents stored per session
//! and per question, which travel inside them unchanged.

use flotilla_model::session::Mode;
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
    /// The branch its tree checks the base out on (`None`: a detached `HEAD`), for
    /// a runtime that makes the tree itself (a pod's init container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree_branch: Option<String>,
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

/// A runtime's process (or pod).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct RuntimeRecord {
    /// Its pid (bwrap's; 0 for a pod).
    pub pid: u32,
    /// Its start time, clock ticks since boot (with the pid, its identity; 0 for a
    /// pod).
    pub start_ticks: u64,
    /// When it was booted, ms since the Unix epoch.
    pub booted_ms: i64,
    /// Its number (1, 2, 3…).
    pub boot: u64,
    /// Its pod, when sessions run on Kubernetes (`[runtime] kind = "kubernetes"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<RuntimePod>,
}

impl RuntimeRecord {
    /// What it is, for people: `pid 4242` or `pod agents/flotilla-session-3-2`.
    pub fn describe(&self) -> String {
        match &self.pod {
            Some(p) => format!("pod {}/{}", p.namespace, p.name),
            None => format!("pid {}", self.pid),
        }
    }
}

/// The Pod a session's runtime runs in on a Kubernetes cluster.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct RuntimePod {
    /// Its namespace.
    pub namespace: String,
    /// Its name (`flotilla-session-<id>-<boot>`).
    pub name: String,
    /// Its `metadata.uid` (a pod made again under the same name is another).
    pub uid: String,
}

/// How a runtime ended.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub struct RuntimeEnd {
    /// When, ms since the Unix epoch (when it was noticed).
    pub at_ms: i64,
    /// Its exit code, when it was reaped here.
    pub code: Option<i32>,
    /// `exited`, `gone` (found not running), `idle` or `stopped` (torn down), or
    /// `boot-failed` (no runtime started; `detail` says why).
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

/// `POST /v1/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct CreateSessionRequest {
    /// The repository (a name in `sessions.toml`).
    pub repo: String,
    /// Where the runtime runs (`local`, the default).
    #[serde(default)]
    pub host: Option<String>,
    /// The launch mode (default `default`).
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub mode: Option<Mode>,
    /// A first message (boots the runtime at once).
    #[serde(default)]
    pub prompt: Option<String>,
}

/// A session as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionDto {
    /// Its id.
    pub id: u64,
    /// Its derived state.
    pub state: SessionState,
    /// Whether a runtime runs (reconciled now).
    pub runtime_alive: bool,
    /// Open questions.
    pub open_questions: usize,
    /// The launch mode and what the runtime reported, with a flag when they
    /// differ.
    pub mode_mismatch: bool,
    /// The stored document.
    pub doc: SessionDoc,
    /// When it was created, ms since the Unix epoch.
    pub created_ms: i64,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionsResponse {
    /// Newest first.
    pub sessions: Vec<SessionDto>,
}

/// One event of a session's log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionEventDto {
    /// Its sequence number.
    pub seq: u64,
    /// When, ms since the Unix epoch.
    pub at_ms: i64,
    /// The event (`{"kind": "…", …}`).
    #[schema(value_type = Object)]
    pub event: serde_json::Value,
}

/// `GET /v1/sessions/{id}/events`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SessionEventsResponse {
    /// Oldest first.
    pub events: Vec<SessionEventDto>,
}

/// `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MessageRequest {
    /// The message.
    pub text: String,
}

/// `POST /v1/sessions/{id}/mode`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ModeRequest {
    /// The mode asked for.
    pub mode: String,
}

/// A question as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuestionDto {
    /// Its id.
    pub id: u64,
    /// The session that asked.
    pub session: u64,
    /// When it was asked, ms since the Unix epoch.
    pub asked_ms: i64,
    /// The question.
    pub doc: QuestionDoc,
}

/// `GET /v1/questions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct QuestionsResponse {
    /// Newest first.
    pub questions: Vec<QuestionDto>,
}

/// `POST /v1/questions/{id}/answer`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AnswerRequest {
    /// `allow` or `deny`.
    pub decision: String,
    /// A note for the agent.
    #[serde(default)]
    pub note: Option<String>,
}

/// `POST /v1/exec`: run an argv list for the calling session.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecRequest {
    /// The program and its arguments (never a shell string).
    pub argv: Vec<String>,
}

/// `POST /v1/push`: push commits of the calling session's tree (`flotilla push`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct PushRequest {
    /// The remote: `origin` (the default), the session's repository; no other.
    #[serde(default)]
    pub remote: Option<String>,
    /// `SRC[:DST]`: `SRC` is `HEAD` (the default) or a branch of the session's
    /// tree; `DST` a branch of the remote (`main` or `refs/heads/main`; default
    /// `flotilla/session-<id>`). No `+` (force).
    #[serde(default)]
    pub refspec: Option<String>,
}

/// What became of a push request: always a question first; the authority pushes
/// once a human allows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PushResponse {
    /// `asked`: the question waits for a human.
    pub outcome: String,
    /// The question.
    pub question: u64,
    /// The commit that would be pushed (full id).
    pub commit: String,
    /// The remote's branch it would update.
    pub branch: String,
    /// The commits from the session's base to it, newest first (`<short id> <subject>`).
    pub commits: Vec<String>,
}

/// What the executor did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ExecResponse {
    /// `ran`, or `asked` (a question was opened: nothing ran).
    pub outcome: String,
    /// The question, when asked.
    pub question: Option<u64>,
    /// The exit status (`None`: killed by a signal or the timeout).
    pub status: Option<i32>,
    /// Whether the executor's timeout ended it.
    pub timed_out: bool,
    /// Standard output, capped.
    pub stdout: String,
    /// Standard error, capped.
    pub stderr: String,
    /// The whole outputs' ids, when capped (`GET /v1/outputs/{id}`).
    pub outputs: Vec<String>,
}

/// `POST /v1/alerts/alertmanager`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AlertsResponse {
    /// Sessions opened.
    pub opened: Vec<u64>,
    /// Sessions that got an event (resolved).
    pub updated: Vec<u64>,
    /// Alerts that changed nothing (repeats, not matching).
    pub unchanged: usize,
}

/// Query of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    /// Only events after this sequence number.
    #[serde(default)]
    pub after: u64,
}

/// `POST /v1/credentials/alerts`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AlertsCredentialRequest {
    /// The sender's name (e.g. `alertmanager`).
    pub name: String,
}

/// A new alert sender's credential (shown once; stored hashed).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AlertsCredentialResponse {
    /// The sender's name.
    pub name: String,
    /// The bearer token for Alertmanager's `http_config.authorization.credentials`.
    pub credential: String,
}

/// What a session's delete freed, measured (`DELETE /v1/sessions/{id}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct CleanupReport {
    /// The session.
    pub id: u64,
    /// Bytes under its directory before, all gone now: the sizes of its regular
    /// files and symbolic links (a file with several links counted once).
    pub freed_bytes: u64,
    /// Files under its directory before (everything but directories), all gone now.
    pub freed_files: u64,
    /// What was removed: its directory's entries (`tree`, `home`, `run`, the
    /// transcripts…), then the directory itself; for a session on a cluster, its
    /// objects there too (`PersistentVolumeClaim agents/flotilla-session-3`…).
    pub removed: Vec<String>,
    /// Whether its pin in the repository's mirror was there and is gone.
    pub pin_dropped: bool,
    /// The mirror refs dropped (its pin, its latest push request).
    pub refs_dropped: Vec<String>,
    /// The pid of the runtime a forced delete killed first.
    #[serde(default)]
    pub runtime_killed: Option<u32>,
    /// Store rows deleted with the session's: events.
    pub events: u64,
    /// … questions.
    pub questions: u64,
    /// … its runtimes' credentials.
    pub credentials: u64,
    /// Executor outputs (blob ids) this session referenced, kept: blobs are shared
    /// by content.
    #[serde(default)]
    pub outputs_kept: Vec<String>,
    /// Mirrors removed after this delete (no pin left, unused for `[retention]
    /// mirror_grace`).
    #[serde(default)]
    pub mirrors_removed: Vec<MirrorReport>,
}

/// A mirror removed because no session uses it any more, measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
pub struct MirrorReport {
    /// The repository (a name in `sessions.toml`).
    pub repo: String,
    /// Its directory (gone).
    pub path: String,
    /// Bytes it held (regular files and links).
    pub freed_bytes: u64,
    /// Files it held.
    pub freed_files: u64,
}
