//! The sessions' requests and answers on `/v1` (JSON, with their OpenAPI schemas).

use super::docs::{QuestionDoc, SessionDoc, SessionState};
use flotilla_sessions::Mode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

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
