//! Agent sessions on the authority: sessions, their runtimes, the gate's HTTP
//! front door, durable questions, Alertmanager's webhook, the executor and capped
//! outputs (DESIGN.md: session / gate / question).
//!
//! - A session is a row; **the first message boots its runtime** (the agent's
//!   process, `claude -p`, in a bubblewrap sandbox, see
//!   [`flotilla_sessions::runtime`]). There is no queue, no lease and no
//!   heartbeat: whether a runtime runs is **reconciled** against the process
//!   itself (pid and start time) on every read and every
//!   [`SessionsConfig::reconcile_every`]; the child's exit is also seen at once by
//!   the task that reaps it. One lock per session makes concurrent messages boot
//!   at most one runtime; a message that arrives while one runs waits in the
//!   session's `pending` list and starts the next turn when this one ends.
//! - Session states are derived from facts ([`derive_state`]): a runtime alive,
//!   an open question, the last turn's end. Nothing writes a state.
//! - Every tool call of the agent reaches [`gate_hook`] (through `flotilla gate
//!   hook`, the command hook, or directly as Claude Code's HTTP hook). `Ask`
//!   becomes a question and the turn parks (`defer`); the answer boots a runtime
//!   that resumes the conversation, and applies to that exact input, once.
//! - The mode is a launch profile: a switch is refused and recorded; the mode
//!   every hook payload reports is compared with the launch mode.
//! - Deleting a session (its files, mirror refs and rows, measured) and
//!   `[retention]` live in [`crate::session_cleanup`].

use crate::api::ApiError;
use crate::failure::{Answer, Failure};
use crate::privsep::launcher;
pub use crate::sessions_config::*;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_sessions::alerts::Matcher;
use flotilla_sessions::clone_cache::CloneCache;
use flotilla_sessions::executor::Allowlist;
use flotilla_sessions::hook::{HookAnswer, HookEvent, HookHandler, HookInput};
use flotilla_sessions::output;
use flotilla_sessions::policy::Policy;
use flotilla_sessions::runtime::Network;
use flotilla_sessions::{Decision, Mode, ToolCall};
use flotilla_store::authority::{AuthorityStore, Principal};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;

/// The authority's sessions, when `sessions.toml` is present.
pub struct Sessions {
    pub(crate) config: SessionsConfig,
    policy: Arc<Policy>,
    matchers: Vec<Matcher>,
    allowlist: Allowlist,
    pub(crate) dir: PathBuf,
    /// The authority's URL as the sandbox reaches it, and its CA (PEM).
    url: String,
    ca_pem: String,
    /// The launcher and the executor.
    privileged: crate::privsep::Privileged,
    flotilla_exe: PathBuf,
    claude: PathBuf,
    /// `[runtime] uids`, inclusive.
    uids: (u32, u32),
    /// What runtimes reach through the authority (`network = "proxy"`).
    egress: Arc<crate::egress::EgressSetup>,
    /// Held while a uid is chosen for a session (no two sessions get one).
    uid_allocation: tokio::sync::Mutex<()>,
    pub(crate) clones: CloneCache,
    /// One lock per session: boots and turn ends are serialised per session.
    locks: std::sync::Mutex<HashMap<u64, Arc<tokio::sync::Mutex<()>>>>,
    /// Executor runs in progress (at most `[executor] max_running`).
    executor_slots: tokio::sync::Semaphore,
    /// Executor runs in progress per session (at most `[executor]
    /// max_running_per_session` each).
    executor_running: Arc<std::sync::Mutex<HashMap<u64, usize>>>,
    /// Boots in progress (each holds a place under `max_runtimes`).
    booting: std::sync::Mutex<usize>,
    /// Held while a question is answered or an answer is used: one answer per
    /// question, and an answer used once.
    answers: tokio::sync::Mutex<()>,
    /// Live runtimes this process started: session → (pid, last activity ms).
    pub(crate) live: std::sync::Mutex<HashMap<u64, Live>>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    pid: u32,
    activity_ms: i64,
}

/// Where the sessions machinery is set up from (`flotilla serve`).
#[derive(Debug, Clone)]
pub struct SessionsSetup {
    /// The parsed `sessions.toml`.
    pub config: SessionsConfig,
    /// The authority's directory (the launcher hides it from runtimes).
    pub authority_dir: PathBuf,
    /// The authority's URL as seen from the sandbox (`https://127.0.0.1:<port>`).
    pub url: String,
    /// The CA (PEM) the runtime's hook pins.
    pub ca_pem: String,
    /// The launcher and the executor ([`crate::privsep::setup`]).
    pub privileged: crate::privsep::Privileged,
}

impl Sessions {
    /// Sets up from `setup`: finds the Claude Code executable, the runtime user,
    /// and this program (run inside the sandbox as the command hook).
    ///
    /// # Errors
    /// A message when one of them cannot be found.
    pub fn new(setup: SessionsSetup) -> Result<Sessions, String> {
        let config = setup.config;
        let max_running = config.executor.max_running;
        let policy = config.policy()?;
        let matchers = config.matchers()?;
        let allowlist = match &config.executor.allow {
            None => Allowlist::default_reads(),
            Some(list) => {
                Allowlist::new(list.clone()).map_err(|e| format!("[executor] allow: {e}"))?
            }
        };
        let dir = config
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_SESSIONS_DIR));
        let claude = match &config.runtime.claude {
            Some(p) => p.clone(),
            None => {
                which("claude").ok_or("[runtime] claude is not set and `claude` is not on PATH")?
            }
        };
        let uids = parse_uids(&config.runtime.uids).map_err(|e| format!("[runtime] uids: {e}"))?;
        let flotilla_exe =
            std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o711)
                .create(&dir)
                .map_err(|e| {
                    format!("cannot make the sessions directory {}: {e}", dir.display())
                })?;
        }
        // Every session uid must reach what the sandbox binds (bwrap runs as it):
        // checked for the first of the range (it owns none of these).
        let (uid, gid) = (uids.0, uids.0);
        for (what, p) in [
            ("the sessions directory", &dir),
            ("this program (the gate's hook)", &flotilla_exe),
            ("Claude Code", &claude),
        ] {
            if let Some(closed) = crate::privsep::closed_to(p, uid, gid) {
                return Err(format!(
                    "{what} {} cannot be reached by the sessions' uids ({}): {} is closed to them \
                     (give it o+x, or choose a path they can reach)",
                    p.display(),
                    config.runtime.uids,
                    closed.display()
                ));
            }
        }
        let api = setup
            .url
            .strip_prefix("https://")
            .and_then(|a| a.parse::<std::net::SocketAddr>().ok())
            .ok_or_else(|| format!("the authority's URL `{}` is not https://IP:PORT", setup.url))?;
        let model = match &config.egress.model {
            None => None,
            Some(m) => Some(crate::egress::ModelUpstream {
                url: m.url.trim_end_matches('/').to_string(),
                header: m.header.to_ascii_lowercase(),
                key: std::fs::read_to_string(&m.key_file)
                    .map_err(|e| format!("[egress.model] key_file {}: {e}", m.key_file.display()))?
                    .trim()
                    .to_string(),
            }),
        };
        let egress = Arc::new(crate::egress::EgressSetup {
            allow: config.egress.allow.clone(),
            model,
            api,
        });
        Ok(Sessions {
            clones: CloneCache::new(dir.join("mirrors")),
            policy: Arc::new(policy),
            matchers,
            allowlist,
            url: setup.url,
            privileged: setup.privileged,
            ca_pem: setup.ca_pem,
            flotilla_exe,
            claude,
            uids,
            egress,
            uid_allocation: tokio::sync::Mutex::new(()),
            dir,
            config,
            locks: std::sync::Mutex::new(HashMap::new()),
            answers: tokio::sync::Mutex::new(()),
            booting: std::sync::Mutex::new(0),
            executor_slots: tokio::sync::Semaphore::new(max_running),
            executor_running: Arc::default(),
            live: std::sync::Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn lock_of(&self, id: u64) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .expect("not poisoned")
            .entry(id)
            .or_default()
            .clone()
    }

    /// The launcher's socket (the root piece, [`crate::privsep`]).
    pub(crate) fn launcher_socket(&self) -> &std::path::Path {
        &self.privileged.launcher
    }

    pub(crate) fn session_dir(&self, id: u64) -> PathBuf {
        self.dir.join(id.to_string())
    }
}

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

fn off() -> Failure {
    Failure::new(
        StatusCode::CONFLICT,
        "sessions-off",
        format!("agent sessions are off: the authority has no {SESSIONS_CONFIG_FILE}"),
    )
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, "invalid", message)
}

fn not_found(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::NOT_FOUND, "not-found", message)
}

pub(crate) fn sessions_of<S>(state: &AppState<S>) -> Result<&Sessions, Failure> {
    state.sessions.as_ref().ok_or_else(off)
}

async fn event<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    ev: serde_json::Value,
) -> Result<(), Failure> {
    state
        .store
        .append_session_event(id, ev.to_string(), now_ms())
        .await?;
    Ok(())
}

pub(crate) async fn load_session<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<(SessionDoc, i64), Failure> {
    let rec = state
        .store
        .session(id)
        .await?
        .ok_or_else(|| not_found(format!("no session {id}")))?;
    let doc = serde_json::from_str(&rec.doc).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "corrupt",
            format!("session {id}'s document does not parse: {e}"),
        )
    })?;
    Ok((doc, rec.created_ms))
}

async fn save_session<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    doc: &SessionDoc,
) -> Result<(), Failure> {
    state
        .store
        .put_session(
            id,
            serde_json::to_string(doc).expect("serialises"),
            now_ms(),
        )
        .await?;
    Ok(())
}

pub(crate) fn alive(r: &RuntimeRecord) -> bool {
    flotilla_exec::process_start_ticks(r.pid) == Some(r.start_ticks)
}

/// Reconciles session `id` against its runtime's process (under its lock): a
/// runtime that no longer runs is cleared (`gone`), one idle too long is torn
/// down. Returns the document and whether a runtime runs.
async fn reconcile<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<(SessionDoc, i64, bool), Failure> {
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    // A session whose lock is held is being booted or ended: read it as it is
    // (liveness measured now) rather than wait behind that (a slow clone).
    let Ok(_held) = lock.try_lock() else {
        let (doc, created_ms) = load_session(state, id).await?;
        let running = doc.runtime.as_ref().is_some_and(alive);
        return Ok((doc, created_ms, running));
    };
    let (mut doc, created_ms) = load_session(state, id).await?;
    let Some(rt) = doc.runtime else {
        return Ok((doc, created_ms, false));
    };
    if !alive(&rt) {
        let ev = serde_json::json!({"kind": "runtime-gone", "pid": rt.pid, "boot": rt.boot});
        end_runtime(state, id, &mut doc, "gone", ev).await?;
        return Ok((doc, created_ms, false));
    }
    // Its last activity: its last gate call, or the last time it wrote output.
    let asked = sessions
        .live
        .lock()
        .expect("not poisoned")
        .get(&id)
        .map(|l| l.activity_ms)
        .unwrap_or(rt.booted_ms);
    let wrote = std::fs::metadata(
        sessions
            .session_dir(id)
            .join(format!("runtime-{}.jsonl", rt.boot)),
    )
    .and_then(|m| m.modified())
    .ok()
    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    .map_or(0, |d| d.as_millis() as i64);
    let activity = asked.max(wrote).max(rt.booted_ms);
    let idle = sessions.config.runtime.idle_timeout.as_millis() as i64;
    if now_ms() - activity > idle {
        kill_runtime(sessions, &rt).await;
        let ev = serde_json::json!({"kind": "runtime-torn-down", "why": "idle", "pid": rt.pid});
        end_runtime(state, id, &mut doc, "idle", ev).await?;
        return Ok((doc, created_ms, false));
    }
    Ok((doc, created_ms, true))
}

/// Records that session `id`'s runtime is over (`how`: `gone`, `idle`,
/// `stopped`), its credential with it, and logs `ev`. The session's lock is held.
async fn end_runtime<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    doc: &mut SessionDoc,
    how: &str,
    ev: serde_json::Value,
) -> Result<(), Failure> {
    doc.runtime = None;
    doc.token_hash = None;
    doc.last_end = Some(RuntimeEnd {
        at_ms: now_ms(),
        code: None,
        how: how.into(),
        detail: None,
    });
    if let Some(sessions) = state.sessions.as_ref() {
        sessions.live.lock().expect("not poisoned").remove(&id);
    }
    save_session(state, id, doc).await?;
    event(state, id, ev).await
}

/// Kills runtime `rt` through the launcher that started it (the only piece that
/// may signal it). The sandbox dies with bwrap (--die-with-parent), and with it
/// every process inside (--unshare-pid: its pid 1 is gone).
pub(crate) async fn kill_runtime(sessions: &Sessions, rt: &RuntimeRecord) {
    if alive(rt) {
        if let Err(e) = launch(sessions, launcher::Request::Kill { pid: rt.pid }, &[]).await {
            tracing::warn!("killing runtime pid {}: {e}", rt.pid);
        }
    }
}

async fn open_questions<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<(u64, u64, i64, QuestionDoc)>, Failure> {
    Ok(state
        .store
        .questions()
        .await?
        .into_iter()
        .filter_map(|q| {
            serde_json::from_str::<QuestionDoc>(&q.doc)
                .ok()
                .map(|d| (q.id, q.session, q.created_ms, d))
        })
        .collect())
}

async fn dto<S: AuthorityStore>(state: &AppState<S>, id: u64) -> Result<SessionDto, Failure> {
    let (doc, created_ms, runtime_alive) = reconcile(state, id).await?;
    let open = open_questions(state)
        .await?
        .iter()
        .filter(|(_, s, _, q)| *s == id && q.answer.is_none())
        .count();
    Ok(SessionDto {
        id,
        state: derive_state(&doc, runtime_alive, open),
        runtime_alive,
        open_questions: open,
        mode_mismatch: doc
            .observed_mode
            .as_deref()
            .is_some_and(|m| m != doc.mode.as_str()),
        doc,
        created_ms,
    })
}

/// A random UUID (version 4, RFC 9562) for Claude Code's `--session-id`.
fn new_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

async fn create<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    req: CreateSessionRequest,
    by: String,
    alert: Option<String>,
) -> Result<(u64, bool), Failure> {
    let sessions = sessions_of(state)?;
    if !sessions.config.repos.contains_key(&req.repo) {
        return Err(invalid(format!(
            "no repository `{}` in {SESSIONS_CONFIG_FILE} (known: {})",
            req.repo,
            sessions
                .config
                .repos
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let host = req.host.unwrap_or_else(|| "local".into());
    if host != "local" {
        return Err(invalid(format!(
            "runtimes run on the authority's host only (`--host local`), not `{host}`"
        )));
    }
    let doc = SessionDoc {
        repo: req.repo,
        host,
        mode: req.mode.unwrap_or_default(),
        created_by: by.clone(),
        agent_session: new_uuid(),
        prompt: req.prompt.clone(),
        tree: None,
        base_commit: None,
        runtime: None,
        boots: 0,
        last_end: None,
        pending: Vec::new(),
        observed_mode: None,
        alert: alert.clone(),
        token_hash: None,
        uid: None,
        waiting_for_capacity: false,
        resume_after: false,
    };
    let created = state
        .store
        .create_session(
            serde_json::to_string(&doc).expect("serialises"),
            alert,
            now_ms(),
        )
        .await?;
    if !created.created {
        return Ok((created.id, false));
    }
    event(
        state,
        created.id,
        serde_json::json!({"kind": "created", "by": by, "mode": doc.mode, "repo": doc.repo}),
    )
    .await?;
    if let Some(p) = req.prompt {
        deliver_detached(state, created.id, Some(p), false).await?;
    }
    Ok((created.id, true))
}

/// Gives session `id` a message (or, with `None`, resumes it after an answer):
/// boots a runtime when none runs, else keeps the message for the next turn.
async fn deliver<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    text: Option<String>,
    resume: bool,
) -> Result<(), Failure> {
    // Reconciled first (a dead runtime cleared), then decided under the
    // session's lock on the runtime's liveness now.
    reconcile(state, id).await?;
    let sessions = sessions_of(state)?;
    let lock = sessions.lock_of(id);
    let _held = lock.lock().await;
    let (mut doc, _) = load_session(state, id).await?;
    if let Some(t) = &text {
        event(state, id, serde_json::json!({"kind": "message", "text": t})).await?;
    }
    if doc.runtime.as_ref().is_some_and(alive) {
        match text {
            Some(t) => doc.pending.push(t),
            // An answer while the turn that asked is still ending: resume after.
            None if resume => doc.resume_after = true,
            None => return Ok(()),
        }
        save_session(state, id, &doc).await?;
        return Ok(());
    }
    if text.is_none() && doc.pending.is_empty() && !resume && !doc.resume_after {
        // Nothing to give a runtime (the messages were taken meanwhile).
        return Ok(());
    }
    let resume = resume || doc.resume_after;
    let mut messages = std::mem::take(&mut doc.pending);
    messages.extend(text);
    // Capacity is decided and reserved in one step (runtimes running plus boots
    // in progress), so concurrent boots cannot all pass the check; a slow boot
    // holds its reservation, not a lock the others wait on.
    let reserved = {
        let live = sessions.live.lock().expect("not poisoned").len();
        let mut booting = sessions.booting.lock().expect("not poisoned");
        if live + *booting < sessions.config.runtime.max_runtimes {
            *booting += 1;
            true
        } else {
            false
        }
    };
    if !reserved {
        // At capacity: the messages wait; the reconciler boots this session when
        // a runtime ends.
        doc.pending = messages;
        doc.waiting_for_capacity = true;
        doc.resume_after |= resume;
        save_session(state, id, &doc).await?;
        event(
            state,
            id,
            serde_json::json!({"kind": "waiting-for-capacity", "max_runtimes": sessions.config.runtime.max_runtimes}),
        )
        .await?;
        return Ok(());
    }
    doc.waiting_for_capacity = false;
    let kept = messages.clone();
    let booted = boot(state, id, &mut doc, messages).await;
    *sessions.booting.lock().expect("not poisoned") -= 1;
    match booted {
        Ok(()) => Ok(()),
        Err(e) => {
            // Nothing is lost: the messages wait for the next boot.
            let (mut fresh, _) = load_session(state, id).await?;
            fresh.pending = kept;
            fresh.pending.append(&mut doc.pending);
            save_session(state, id, &fresh).await?;
            event(
                state,
                id,
                serde_json::json!({"kind": "boot-failed", "error": e.message()}),
            )
            .await?;
            Err(e)
        }
    }
}

/// [`deliver`] in a task of its own, awaited: a client that goes away mid-way
/// (its request dropped) does not cut a delivery in half and lose a message.
async fn deliver_detached<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    text: Option<String>,
    resume: bool,
) -> Result<(), Failure> {
    let state = state.clone();
    tokio::spawn(async move { deliver(&state, id, text, resume).await })
        .await
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "runtime",
                format!("session {id}: delivering a message: {e}"),
            )
        })?
}

/// The real uids of every process of this host (`/proc/*/status`).
fn uids_in_use() -> std::collections::HashSet<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// One request to the launcher (the root piece, [`crate::privsep`]), off the
/// async runtime.
async fn launch(
    sessions: &Sessions,
    req: launcher::Request,
    fds: &[std::os::fd::RawFd],
) -> std::io::Result<launcher::Reply> {
    let socket = sessions.privileged.launcher.clone();
    let fds = fds.to_vec();
    tokio::task::spawn_blocking(move || launcher::call(&socket, &req, &fds))
        .await
        .map_err(std::io::Error::other)?
}

/// Session `id`'s uid: the one it has, else the lowest of `[runtime] uids` that no
/// other session holds and no account of this host has (saved in its document).
async fn session_uid<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    doc: &mut SessionDoc,
) -> Result<u32, Failure> {
    if let Some(u) = doc.uid {
        return Ok(u);
    }
    let sessions = sessions_of(state)?;
    let _held = sessions.uid_allocation.lock().await;
    let taken: std::collections::HashSet<u32> = state
        .store
        .sessions()
        .await?
        .iter()
        .filter(|r| r.id != id)
        .filter_map(|r| serde_json::from_str::<SessionDoc>(&r.doc).ok()?.uid)
        .collect();
    let (first, last) = sessions.uids;
    // Also skipped: a uid any process runs as (another authority on this host, or
    // a runtime of a session this one forgot).
    let running = uids_in_use();
    let free = (first..=last).find(|u| {
        !taken.contains(u)
            && !running.contains(u)
            && nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(*u))
                .ok()
                .flatten()
                .is_none()
    });
    let Some(uid) = free else {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "no-uid",
            format!(
                "every uid of [runtime] uids ({first}-{last}) belongs to a session or an account: delete old sessions or widen the range"
            ),
        ));
    };
    doc.uid = Some(uid);
    save_session(state, id, doc).await?;
    event(state, id, serde_json::json!({"kind": "uid", "uid": uid})).await?;
    Ok(uid)
}

/// Boots a runtime for session `id` (its lock held, none running): makes the tree
/// and home on the first boot, writes the runtime's files, starts the sandbox and a
/// task that reaps it.
///
/// What the authority writes for a runtime lives in `<session>/run/`, a directory
/// of root's the agent can read but not change (never in the agent's writable
/// home, where a symlink could redirect a write of root's): the gate's hook
/// settings, the CA, the session's credential (readable by the runtime user only)
/// and the turn's prompt (given on stdin, never on a command line that `ps` shows).
async fn boot<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    doc: &mut SessionDoc,
    messages: Vec<String>,
) -> Result<(), Failure> {
    let sessions = sessions_of(state)?;
    let sdir = sessions.session_dir(id);
    let home = sdir.join("home");
    let tree = sdir.join("tree");
    let run = sdir.join("run");
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "runtime",
            format!("session {id}: {what}: {e}"),
        )
    };
    let legacy = doc.uid.is_none() && doc.tree.is_some();
    let uid = session_uid(state, id, doc).await?;
    // Made here (as the API user), then given to the session's uid by the launcher
    // (the only root piece): when made, and for a session from before uids.
    let mut give = legacy;
    if doc.tree.is_none() {
        let repo = sessions.config.repos[&doc.repo].clone();
        let clones = sessions.clones.clone();
        let name = doc.repo.clone();
        let dest = tree.clone();
        let sid = id.to_string();
        let made = tokio::task::spawn_blocking(move || {
            clones.session_tree(&name, &repo.url, &sid, &dest, repo.base.as_deref())
        })
        .await
        .map_err(|e| internal("making its tree", &e))?
        .map_err(|e| internal("making its tree", &e))?;
        give = true;
        doc.tree = Some(made.path.display().to_string());
        doc.base_commit = Some(made.base_commit.clone());
        save_session(state, id, doc).await?;
        event(
            state,
            id,
            serde_json::json!({"kind": "tree", "path": made.path, "base": made.base_commit}),
        )
        .await?;
    }
    if !home.exists() {
        std::fs::create_dir_all(&home).map_err(|e| internal("making its home", &e))?;
        give = true;
    }
    if give {
        // Its own only (0700); the session's directory is traversed, not listed.
        launch(sessions, launcher::Request::Own { id, uid }, &[])
            .await
            .map_err(|e| internal("giving its tree and home to its uid", &e))?;
    }
    close_to_others(&sdir, 0o711).map_err(|e| internal("closing the session's directory", &e))?;
    // Nothing the last runtime left in its home's start-up files runs in this one
    // unless a tool call the gate saw puts it there again.
    let reset = launch(
        sessions,
        launcher::Request::ResetHome {
            id,
            agent_session: doc.agent_session.clone(),
        },
        &[],
    )
    .await
    .map_err(|e| internal("resetting its home", &e))?;
    let launcher::Reply::Reset {
        removed,
        transcript,
    } = reset
    else {
        return Err(internal("resetting its home", &"an unexpected answer"));
    };
    if !removed.is_empty() {
        event(
            state,
            id,
            serde_json::json!({"kind": "home-reset", "removed": removed}),
        )
        .await?;
    }
    let boot_no = doc.boots + 1;
    // The runtime's files, the API's (the credential the launcher's): replaced
    // whole at every boot.
    let _ = std::fs::remove_dir_all(&run);
    {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .mode(0o711)
            .create(&run)
            .map_err(|e| internal("making its run directory", &e))?;
        let write = |name: &str, mode: u32, bytes: &[u8]| -> std::io::Result<PathBuf> {
            let p = run.join(name);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .open(&p)?;
            std::io::Write::write_all(&mut f, bytes)?;
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
            Ok(p)
        };
        write("ca.pem", 0o644, sessions.ca_pem.as_bytes())
            .map_err(|e| internal("writing the CA", &e))?;
        let settings = flotilla_sessions::hook::gate_settings(&HookHandler::Command {
            program: sessions.flotilla_exe.display().to_string(),
            args: vec!["gate".into(), "hook".into()],
            timeout_secs: 120,
        });
        write("settings.json", 0o644, settings.to_string().as_bytes())
            .map_err(|e| internal("writing the hook settings", &e))?;
        if !messages.is_empty() {
            write("prompt", 0o600, messages.join("\n\n").as_bytes())
                .map_err(|e| internal("writing the prompt", &e))?;
        }
    }
    // The session's credential: one per boot, valid while this runtime runs
    // (checked against `token_hash` and the runtime's liveness at every call).
    let token = crate::auth::new_secret("flt-session-");
    let token_hash = crate::auth::hash_secret(&token);
    state
        .store
        .create_credential(token_hash.clone(), Principal::Session { id }, now_ms())
        .await?;
    launch(
        sessions,
        launcher::Request::Token {
            id,
            uid,
            token: token.clone(),
        },
        &[],
    )
    .await
    .map_err(|e| internal("giving its credential to its uid", &e))?;

    // Claude Code's headless command line (measured against 2.1.328): the first
    // runtime names the conversation (`--session-id`), later ones `--resume` it
    // (once its transcript exists: a first runtime that never started leaves
    // none); a resume with no message settles the call a question deferred (the
    // hook fires again for it). The prompt comes on stdin. `--setting-sources ""`
    // ignores the tree's and the home's settings files (a `.claude/settings.json`
    // with `disableAllHooks` would turn the gate off) and keeps `--settings`; the
    // mode is given on every launch (a resume does not remember it).
    let first = !transcript;
    let mut args = vec!["-p".to_string()];
    if first {
        args.extend(["--session-id".into(), doc.agent_session.clone()]);
    } else {
        args.extend(["--resume".into(), doc.agent_session.clone()]);
    }
    args.extend([
        "--permission-mode".into(),
        doc.mode.as_str().into(),
        "--setting-sources".into(),
        String::new(),
        "--settings".into(),
        run.join("settings.json").display().to_string(),
        "--output-format".into(),
        "stream-json".into(),
        "--verbose".into(),
    ]);
    args.extend(sessions.config.runtime.args.iter().cloned());
    let messages_given = if messages.is_empty() && first {
        // A first runtime needs a prompt: the session's, or a neutral one.
        let p = doc.prompt.clone().unwrap_or_else(|| "Begin.".into());
        std::fs::write(run.join("prompt"), p).map_err(|e| internal("writing the prompt", &e))?;
        1
    } else {
        messages.len()
    };
    // No traffic but to the model API (measured: without this, Claude Code looks
    // up its vendor's hosts); the configured environment may override it.
    let mut env: Vec<(String, String)> = vec![(
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
        "1".into(),
    )];
    // With `network = "proxy"` the sandbox has no network of its own: the model
    // API, the CONNECT allowlist and the authority are loopback ports inside,
    // bridged to this runtime's sockets (served until its process is reaped).
    let proxied = sessions.config.runtime.network == Network::Proxy;
    let egress = if proxied {
        let weak = Arc::downgrade(state);
        let sink: crate::egress::EventSink = Arc::new(move |e: crate::egress::EgressEvent| {
            let Some(state) = weak.upgrade() else { return };
            tokio::spawn(async move {
                let mut v = serde_json::to_value(&e).unwrap_or_default();
                v["kind"] = "egress".into();
                v["via"] = e.kind.into();
                let _ = event(&state, id, v).await;
            });
        });
        let egress = crate::egress::start(&run, sessions.egress.clone(), sink)
            .map_err(|e| internal("opening its network sockets", &e))?;
        launch(sessions, launcher::Request::Sockets { id, uid }, &[])
            .await
            .map_err(|e| internal("giving its network sockets to its uid", &e))?;
        Some(egress)
    } else {
        None
    };
    let server_url = if proxied {
        format!("https://127.0.0.1:{}", crate::egress::API_PORT)
    } else {
        sessions.url.clone()
    };
    env.extend(
        sessions
            .config
            .runtime
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    env.extend([
        // `flotilla` (the gate's hook, `flotilla exec`) first on PATH.
        (
            "PATH".into(),
            format!(
                "{}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
                sessions
                    .flotilla_exe
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
        ),
        ("FLOTILLA_SERVER".into(), server_url),
        (
            "FLOTILLA_CA".into(),
            run.join("ca.pem").display().to_string(),
        ),
        (
            "FLOTILLA_SESSION_TOKEN_FILE".into(),
            run.join("token").display().to_string(),
        ),
        ("FLOTILLA_SESSION".into(), id.to_string()),
    ]);
    if proxied {
        let proxy = format!("http://127.0.0.1:{}", crate::egress::PROXY_PORT);
        env.extend([
            (
                "ANTHROPIC_BASE_URL".to_string(),
                format!("http://127.0.0.1:{}", crate::egress::MODEL_PORT),
            ),
            (
                "ANTHROPIC_API_KEY".into(),
                crate::egress::PLACEHOLDER_KEY.into(),
            ),
            ("HTTPS_PROXY".into(), proxy.clone()),
            ("https_proxy".into(), proxy.clone()),
            ("HTTP_PROXY".into(), proxy.clone()),
            ("http_proxy".into(), proxy),
            ("NO_PROXY".into(), "127.0.0.1,localhost,::1".into()),
            ("no_proxy".into(), "127.0.0.1,localhost,::1".into()),
        ]);
    }
    // Later entries win (the configured environment cannot undo the above).
    let env: Vec<(String, String)> = {
        let mut seen = std::collections::HashSet::new();
        let mut out: Vec<(String, String)> = env
            .into_iter()
            .rev()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        out.reverse();
        out
    };
    // The launcher builds the sandbox from its own configuration (this
    // session's tree, home, run directory and mirror visible; every other
    // session's files, the authority's directory and root's home hidden) and
    // starts it as the session's uid. The environment reaches the agent through
    // bwrap's own, never `--setenv` on a command line `ps` shows.
    let (program, args) = if proxied {
        // The bridge first: it listens inside, then runs the agent as its child.
        let (model, proxy, api) = crate::egress::socket_paths(&run);
        let mut bridged = vec!["sandbox-bridge".to_string()];
        for (port, sock) in [
            (crate::egress::MODEL_PORT, model),
            (crate::egress::PROXY_PORT, proxy),
            (crate::egress::API_PORT, api),
        ] {
            bridged.push("--forward".into());
            bridged.push(flotilla_sessions::bridge::Forward { port, socket: sock }.to_arg());
        }
        bridged.push("--".into());
        bridged.push(sessions.claude.display().to_string());
        bridged.extend(args);
        ("bridge", bridged)
    } else {
        ("claude", args)
    };
    // The transcript and the agent's stderr: the API's, 0600.
    let private = |name: String| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(sdir.join(name))
    };
    let out = private(format!("runtime-{boot_no}.jsonl"))
        .map_err(|e| internal("opening its output", &e))?;
    let err = private(format!("runtime-{boot_no}.stderr"))
        .map_err(|e| internal("opening its output", &e))?;
    let stdin = match std::fs::File::open(run.join("prompt")) {
        Ok(f) => f,
        Err(_) => {
            std::fs::File::open("/dev/null").map_err(|e| internal("opening /dev/null", &e))?
        }
    };
    let request = launcher::Request::Spawn {
        id,
        uid,
        repo: doc.repo.clone(),
        program: program.into(),
        args,
        env,
    };
    let socket = sessions.privileged.launcher.clone();
    let (pid, start_ticks, exit) = tokio::task::spawn_blocking(move || {
        use std::os::fd::AsRawFd;
        launcher::spawn(
            &socket,
            &request,
            &[stdin.as_raw_fd(), out.as_raw_fd(), err.as_raw_fd()],
        )
    })
    .await
    .map_err(|e| internal("starting its sandbox", &e))?
    .map_err(|e| internal("starting its sandbox (is bubblewrap installed?)", &e))?;
    let rt = RuntimeRecord {
        pid,
        start_ticks,
        booted_ms: now_ms(),
        boot: boot_no,
    };
    doc.runtime = Some(rt);
    doc.boots = boot_no;
    doc.resume_after = false;
    doc.token_hash = Some(token_hash);
    save_session(state, id, doc).await?;
    sessions.live.lock().expect("not poisoned").insert(
        id,
        Live {
            pid,
            activity_ms: now_ms(),
        },
    );
    event(
        state,
        id,
        serde_json::json!({"kind": "runtime-booted", "pid": pid, "boot": boot_no, "resume": !first, "messages": messages_given}),
    )
    .await?;
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let code = tokio::task::spawn_blocking(move || launcher::wait_exit(exit))
            .await
            .ok()
            .flatten();
        // Its network goes with it.
        drop(egress);
        let Some(state) = weak.upgrade() else { return };
        if let Err(e) = ended(&state, id, rt, code).await {
            tracing::error!("session {id}: recording its runtime's end: {}", e.message());
        }
    });
    Ok(())
}

/// Sets `path`'s own mode to `mode` (not following a symlink: `path` is one the
/// authority made).
fn close_to_others(path: &std::path::Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if std::fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link",
            path.display()
        )));
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Records that runtime `rt` of session `id` exited with `code`; boots the next
/// turn when messages arrived meanwhile.
///
/// Boxed with its `Send` bound declared: booting spawns a task that awaits this,
/// and the compiler cannot infer `Send` through that cycle.
fn ended<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    rt: RuntimeRecord,
    code: Option<i32>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Failure>> + Send + '_>> {
    Box::pin(async move {
        let sessions = sessions_of(state)?;
        let lock = sessions.lock_of(id);
        let _held = lock.lock().await;
        if state.store.session(id).await?.is_none() {
            // Deleted (`flotilla session delete --force` stopped it): nothing to record.
            return Ok(());
        }
        let (mut doc, _) = load_session(state, id).await?;
        {
            let mut live = sessions.live.lock().expect("not poisoned");
            if live.get(&id).is_some_and(|l| l.pid == rt.pid) {
                live.remove(&id);
            }
        }
        if doc.runtime != Some(rt) {
            // A read found it dead first (`gone`) while this task was still reaping
            // it: give that end its exit code. Torn down (idle, stopped) or
            // replaced: nothing to add.
            let found_gone = doc.boots == rt.boot
                && doc.runtime.is_none()
                && doc.last_end.as_ref().is_some_and(|e| e.how == "gone");
            if !found_gone {
                return Ok(());
            }
        }
        doc.runtime = None;
        doc.token_hash = None;
        // A failed runtime says why: the end of what it wrote to stderr (bwrap's
        // own refusals land there too).
        let stderr = if code == Some(0) {
            String::new()
        } else {
            let file = format!("runtime-{}.stderr", rt.boot);
            tail(&sessions.session_dir(id).join(file), 2048)
        };
        doc.last_end = Some(RuntimeEnd {
            at_ms: now_ms(),
            code,
            how: "exited".into(),
            detail: (!stderr.is_empty()).then(|| stderr.clone()),
        });
        save_session(state, id, &doc).await?;
        event(
            state,
            id,
            serde_json::json!({"kind": "runtime-exited", "pid": rt.pid, "boot": rt.boot, "code": code, "stderr": stderr}),
        )
        .await?;
        let transcript = launch(
            sessions,
            launcher::Request::HasTranscript {
                id,
                agent_session: doc.agent_session.clone(),
            },
            &[],
        )
        .await;
        let began = matches!(
            transcript,
            Ok(launcher::Reply::Reset {
                transcript: true,
                ..
            })
        );
        if code != Some(0) && !began {
            // It failed before its conversation began: its prompt is given again
            // with the next message.
            if let Ok(p) = std::fs::read_to_string(sessions.session_dir(id).join("run/prompt")) {
                doc.pending.insert(0, p);
                save_session(state, id, &doc).await?;
            }
        } else if !doc.pending.is_empty() || doc.resume_after {
            let resume = doc.resume_after;
            // Messages that came during the turn start the next one (through the
            // same capacity check as every boot, once this lock is released).
            let state2 = state.clone();
            tokio::spawn(async move {
                if let Err(e) = deliver(&state2, id, None, resume).await {
                    tracing::error!("session {id}: the next turn: {}", e.message());
                }
            });
        }
        // A runtime ended: another session's messages may have been waiting.
        let state2 = state.clone();
        tokio::spawn(async move { boot_waiting(&state2).await });
        Ok(())
    })
}

/// The last `max` bytes of the file at `path` (lossy UTF-8; empty when unreadable).
fn tail(path: &std::path::Path, max: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else {
        return String::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(max)));
    let mut buf = Vec::new();
    let _ = f.take(max).read_to_end(&mut buf);
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// Reconciles every session with a runtime every [`SessionsConfig::reconcile_every`].
pub fn spawn_reconciler<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    every_reconcile(state, |state| async move {
        let Ok(all) = state.store.sessions().await else {
            return;
        };
        for rec in all {
            if rec.doc.contains("\"runtime\":{") {
                if let Err(e) = reconcile(&state, rec.id).await {
                    tracing::error!("reconciling session {}: {}", rec.id, e.message());
                }
            }
        }
        boot_waiting(&state).await;
    });
}

/// Runs `pass` every `reconcile_every` (missed ticks delayed, not bunched) for as
/// long as the authority lives; nothing when sessions are off.
pub(crate) fn every_reconcile<S, F, Fut>(state: &Arc<AppState<S>>, pass: F)
where
    S: AuthorityStore,
    F: Fn(Arc<AppState<S>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let Some(sessions) = state.sessions.as_ref() else {
        return;
    };
    let every = sessions.config.reconcile_every;
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { return };
            pass(state).await;
        }
    });
}

/// Boots the sessions whose messages wait for capacity, oldest first, while
/// fewer than `max_runtimes` runtimes run.
async fn boot_waiting<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let Some(sessions) = state.sessions.as_ref() else {
        return;
    };
    let Ok(mut all) = state.store.sessions().await else {
        return;
    };
    all.reverse();
    for rec in all {
        if sessions.live.lock().expect("not poisoned").len() >= sessions.config.runtime.max_runtimes
        {
            return;
        }
        if rec.doc.contains("\"waiting_for_capacity\":true") {
            if let Err(e) = deliver(state, rec.id, None, false).await {
                tracing::error!("session {}: booting after a wait: {}", rec.id, e.message());
            }
        }
    }
}

// ---- routes -------------------------------------------------------------------

/// `POST /v1/sessions`: creates a session (a row; a `prompt` boots its runtime).
#[utoipa::path(post, path = "/v1/sessions", request_body = CreateSessionRequest,
    responses((status = 200, body = SessionDto), (status = 400, body = ApiError), (status = 409, body = ApiError)))]
pub async fn create_session<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<CreateSessionRequest>,
) -> Answer<SessionDto> {
    let by = state.operator(&headers).await?;
    let (id, _) = create(&state, req, by, None).await?;
    Ok(Json(dto(&state, id).await?))
}

/// `GET /v1/sessions`: every session, reconciled, newest first.
#[utoipa::path(get, path = "/v1/sessions", responses((status = 200, body = SessionsResponse)))]
pub async fn list_sessions<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<SessionsResponse> {
    state.operator(&headers).await?;
    sessions_of(&state)?;
    let mut out = Vec::new();
    for rec in state.store.sessions().await? {
        out.push(dto(&state, rec.id).await?);
    }
    Ok(Json(SessionsResponse { sessions: out }))
}

/// `GET /v1/sessions/{id}`: one session, reconciled.
#[utoipa::path(get, path = "/v1/sessions/{id}", params(("id" = u64, Path, description = "the session")),
    responses((status = 200, body = SessionDto), (status = 404, body = ApiError)))]
pub async fn get_session<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Answer<SessionDto> {
    state.operator(&headers).await?;
    Ok(Json(dto(&state, id).await?))
}

/// Query of `GET /v1/sessions/{id}/events`.
#[derive(Debug, Deserialize)]
pub struct EventsQuery {
    /// Only events after this sequence number.
    #[serde(default)]
    pub after: u64,
}

/// `GET /v1/sessions/{id}/events`: the session's log, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", params(("id" = u64, Path, description = "the session"), ("after" = Option<u64>, Query, description = "only events after this sequence number")),
    responses((status = 200, body = SessionEventsResponse), (status = 404, body = ApiError)))]
pub async fn session_events<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    Query(q): Query<EventsQuery>,
    headers: HeaderMap,
) -> Answer<SessionEventsResponse> {
    state.operator(&headers).await?;
    load_session(&state, id).await?;
    let events = state
        .store
        .session_events(id, q.after)
        .await?
        .into_iter()
        .map(|e| SessionEventDto {
            seq: e.seq,
            at_ms: e.at_ms,
            event: serde_json::from_str(&e.doc).unwrap_or(serde_json::Value::String(e.doc)),
        })
        .collect();
    Ok(Json(SessionEventsResponse { events }))
}

/// `POST /v1/sessions/{id}/messages`: a message; boots a runtime if none runs.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", params(("id" = u64, Path, description = "the session")), request_body = MessageRequest,
    responses((status = 200, body = SessionDto), (status = 404, body = ApiError)))]
pub async fn send_message<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Json(req): Json<MessageRequest>,
) -> Answer<SessionDto> {
    state.operator(&headers).await?;
    if req.text.trim().is_empty() {
        return Err(invalid("an empty message"));
    }
    deliver_detached(&state, id, Some(req.text), false).await?;
    Ok(Json(dto(&state, id).await?))
}

/// `POST /v1/sessions/{id}/mode`: always refused (modes are launch profiles), and
/// recorded as refused.
#[utoipa::path(post, path = "/v1/sessions/{id}/mode", params(("id" = u64, Path, description = "the session")), request_body = ModeRequest,
    responses((status = 409, body = ApiError), (status = 404, body = ApiError)))]
pub async fn switch_mode<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Json(req): Json<ModeRequest>,
) -> Result<Response, Failure> {
    let by = state.operator(&headers).await?;
    let (doc, _) = load_session(&state, id).await?;
    if Mode::parse(&req.mode).is_none() {
        return Err(invalid(format!(
            "`{}` is not a mode: default, acceptEdits, plan or bypassPermissions",
            req.mode
        )));
    }
    event(
        &state,
        id,
        serde_json::json!({"kind": "mode-switch-refused", "requested": req.mode, "mode": doc.mode, "by": by}),
    )
    .await?;
    Err(Failure::new(
        StatusCode::CONFLICT,
        "mode-switch-refused",
        format!(
            "session {id} runs in `{}`, chosen at launch: modes are never switched at runtime \
             (the request to switch to `{}` is recorded as refused); create a new session instead",
            doc.mode, req.mode
        ),
    ))
}

/// `DELETE /v1/sessions/{id}/runtime`: tears the runtime down (the next message
/// boots a new one).
#[utoipa::path(delete, path = "/v1/sessions/{id}/runtime", params(("id" = u64, Path, description = "the session")),
    responses((status = 200, body = SessionDto), (status = 404, body = ApiError)))]
pub async fn stop_runtime<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
) -> Answer<SessionDto> {
    state.operator(&headers).await?;
    let sessions = sessions_of(&state)?;
    {
        let lock = sessions.lock_of(id);
        let _held = lock.lock().await;
        let (mut doc, _) = load_session(&state, id).await?;
        if let Some(rt) = doc.runtime {
            kill_runtime(sessions, &rt).await;
            let ev =
                serde_json::json!({"kind": "runtime-torn-down", "why": "stopped", "pid": rt.pid});
            end_runtime(&state, id, &mut doc, "stopped", ev).await?;
        }
    }
    Ok(Json(dto(&state, id).await?))
}

/// `GET /v1/questions`: every question, newest first.
#[utoipa::path(get, path = "/v1/questions", responses((status = 200, body = QuestionsResponse)))]
pub async fn list_questions<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<QuestionsResponse> {
    state.operator(&headers).await?;
    let questions = open_questions(&state)
        .await?
        .into_iter()
        .map(|(id, session, asked_ms, doc)| QuestionDto {
            id,
            session,
            asked_ms,
            doc,
        })
        .collect();
    Ok(Json(QuestionsResponse { questions }))
}

/// `POST /v1/questions/{id}/answer`: answers a question (once) and resumes its
/// session: a runtime boots, the same call reaches the gate again, and the answer
/// applies to that exact input.
#[utoipa::path(post, path = "/v1/questions/{id}/answer", params(("id" = u64, Path, description = "the question")), request_body = AnswerRequest,
    responses((status = 200, body = QuestionDto), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn answer_question<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Json(req): Json<AnswerRequest>,
) -> Answer<QuestionDto> {
    let by = state.operator(&headers).await?;
    sessions_of(&state)?;
    if req.decision != "allow" && req.decision != "deny" {
        return Err(invalid(format!(
            "the answer is `allow` or `deny`, not `{}`",
            req.decision
        )));
    }
    let answering = sessions_of(&state)?.answers.lock().await;
    let rec = state
        .store
        .question(id)
        .await?
        .ok_or_else(|| not_found(format!("no question {id}")))?;
    let mut doc: QuestionDoc = serde_json::from_str(&rec.doc)
        .map_err(|e| invalid(format!("question {id} does not parse: {e}")))?;
    if let Some(a) = &doc.answer {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "answered",
            format!(
                "question {id} was already answered `{}` by {}",
                a.decision, a.by
            ),
        ));
    }
    doc.answer = Some(AnswerDoc {
        decision: req.decision.clone(),
        note: req.note.clone(),
        by: by.clone(),
        at_ms: now_ms(),
    });
    // A push question's answer is used here, once: the authority carries it out.
    let push = doc.tool_name == PUSH_TOOL;
    doc.used |= push;
    state
        .store
        .put_question(
            id,
            serde_json::to_string(&doc).expect("serialises"),
            now_ms(),
        )
        .await?;
    drop(answering);
    event(
        &state,
        rec.session,
        serde_json::json!({"kind": "answer", "question": id, "decision": req.decision, "by": by, "note": req.note}),
    )
    .await?;
    if push {
        carry_out_push(&state, rec.session, id, &mut doc).await?;
    } else if doc.tool_name != EXECUTOR_TOOL {
        deliver_detached(&state, rec.session, None, true).await?;
    }
    Ok(Json(QuestionDto {
        id,
        session: rec.session,
        asked_ms: rec.created_ms,
        doc,
    }))
}

/// The most open questions one session may have; past it, calls that would ask
/// are denied (a runtime cannot flood the humans' queue).
pub const MAX_OPEN_QUESTIONS: usize = 50;

/// Session `id`'s open (unanswered) questions.
async fn open_count<S: AuthorityStore>(state: &AppState<S>, id: u64) -> Result<usize, Failure> {
    Ok(open_questions(state)
        .await?
        .iter()
        .filter(|(_, s, _, q)| *s == id && q.answer.is_none())
        .count())
}

/// Marks answered question `qid` used (an answer applies to one call) and returns
/// its answer. The answers lock is held.
async fn use_answer<S: AuthorityStore>(
    state: &AppState<S>,
    qid: u64,
    mut q: QuestionDoc,
) -> Result<AnswerDoc, Failure> {
    q.used = true;
    state
        .store
        .put_question(
            qid,
            serde_json::to_string(&q).expect("serialises"),
            now_ms(),
        )
        .await?;
    Ok(q.answer.expect("an answered question"))
}

/// Opens a question of session `id` about exactly `tool_name` with `input`; its id.
async fn open_question<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    tool_name: &str,
    input: &serde_json::Value,
    reason: &str,
) -> Result<u64, Failure> {
    let q = QuestionDoc {
        tool_name: tool_name.into(),
        tool_input: input.clone(),
        reason: reason.into(),
        answer: None,
        used: false,
        outcome: None,
    };
    Ok(state
        .store
        .create_question(id, serde_json::to_string(&q).expect("serialises"), now_ms())
        .await?)
}

/// The tool name of executor questions.
pub const EXECUTOR_TOOL: &str = "Executor";

/// The canonical text of a tool input (keys sorted), for "exact input" matching.
fn canonical(v: &serde_json::Value) -> String {
    serde_jcs::to_string(v).unwrap_or_else(|_| v.to_string())
}

/// The answered, unused question of session `session` for exactly this call, if
/// any; or the open one (to reuse rather than ask twice).
async fn find_question<S: AuthorityStore>(
    state: &AppState<S>,
    session: u64,
    tool_name: &str,
    input: &serde_json::Value,
) -> Result<(Option<(u64, QuestionDoc)>, Option<u64>), Failure> {
    let want = canonical(input);
    let mut answered = None;
    let mut open = None;
    for (id, s, _, q) in open_questions(state).await? {
        if s != session || q.tool_name != tool_name || canonical(&q.tool_input) != want {
            continue;
        }
        match &q.answer {
            Some(_) if !q.used => answered = Some((id, q)),
            None => open = Some(id),
            _ => {}
        }
    }
    Ok((answered, open))
}

/// The session whose runtime calls: its credential must be the one its current
/// runtime was given, and that runtime must still run (a credential dies with its
/// runtime: a copy taken from an earlier one is worth nothing).
async fn session_caller<S: AuthorityStore>(
    state: &AppState<S>,
    headers: &HeaderMap,
) -> Result<u64, Failure> {
    let forbidden = |why: &str| Failure::new(StatusCode::FORBIDDEN, "forbidden", why);
    let Principal::Session { id } = state.caller(headers).await? else {
        return Err(forbidden("only a session's runtime may do this"));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::auth::bearer)
        .map(crate::auth::hash_secret);
    let (doc, _) = load_session(state, id).await?;
    let current = doc.runtime.as_ref().is_some_and(alive)
        && doc.token_hash.is_some()
        && doc.token_hash == presented;
    if !current {
        return Err(forbidden(
            "this session credential is not its running runtime's (it ended, or another replaced it)",
        ));
    }
    Ok(id)
}

/// The gate on one hook payload of session `id`: an answered question for this
/// exact call first (used once), else the policy; `Ask` opens (or reuses) a
/// question and parks the turn.
async fn gate<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    input: &HookInput,
) -> Result<HookAnswer, Failure> {
    let sessions = sessions_of(state)?;
    if let Some(l) = sessions.live.lock().expect("not poisoned").get_mut(&id) {
        l.activity_ms = now_ms();
    }
    let (doc, _) = load_session(state, id).await?;
    if let Some(m) = &input.permission_mode {
        if doc.observed_mode.as_deref() != Some(m.as_str()) {
            let mismatch = m != doc.mode.as_str();
            // Written under the session's lock, on the document as it is then.
            let lock = sessions.lock_of(id);
            let _held = lock.lock().await;
            let (mut fresh, _) = load_session(state, id).await?;
            fresh.observed_mode = Some(m.clone());
            save_session(state, id, &fresh).await?;
            event(
                state,
                id,
                serde_json::json!({"kind": "mode-observed", "observed": m, "mode": doc.mode, "mismatch": mismatch}),
            )
            .await?;
        }
    }
    // "Inside the session's tree" is judged against the tree the authority made,
    // never against the `cwd` the payload claims.
    let mut call: ToolCall = input.tool_call();
    if let Some(tree) = &doc.tree {
        call.cwd = tree.clone();
    }
    let answers = sessions.answers.lock().await;
    let (answered, open) = find_question(state, id, &call.tool_name, &call.tool_input).await?;
    if let Some((qid, q)) = answered {
        let a = use_answer(state, qid, q).await?;
        let reason = format!(
            "question {qid} answered `{}` by {}{}",
            a.decision,
            a.by,
            a.note.map(|n| format!(": {n}")).unwrap_or_default()
        );
        event(
            state,
            id,
            serde_json::json!({"kind": "gate", "tool": call.tool_name, "decision": a.decision, "reason": reason, "question": qid}),
        )
        .await?;
        return Ok(if a.decision == "allow" {
            HookAnswer::Allow(reason)
        } else {
            HookAnswer::Deny(reason)
        });
    }
    drop(answers);
    let decision = decide_isolated(doc.mode, &sessions.policy, &call).await;
    let answer = match &decision {
        Decision::Allow { reason } => HookAnswer::Allow(reason.clone()),
        Decision::Deny { reason } => HookAnswer::Deny(reason.clone()),
        Decision::Ask { reason } => {
            let qid = match open {
                Some(q) => q,
                None if open_count(state, id).await? >= MAX_OPEN_QUESTIONS => {
                    return Ok(HookAnswer::Deny(format!(
                        "{reason}; and session {id} already has {MAX_OPEN_QUESTIONS} open questions: denied until a human answers them"
                    )));
                }
                None => {
                    let qid =
                        open_question(state, id, &call.tool_name, &call.tool_input, reason).await?;
                    event(
                        state,
                        id,
                        serde_json::json!({"kind": "question", "question": qid, "tool": call.tool_name, "input": call.tool_input, "reason": reason}),
                    )
                    .await?;
                    qid
                }
            };
            HookAnswer::Defer(format!(
                "{reason}: question {qid} waits for a human (`flotilla question answer {qid} allow|deny`)"
            ))
        }
    };
    event(
        state,
        id,
        serde_json::json!({"kind": "gate", "tool": call.tool_name, "decision": decision.as_str(), "reason": decision.reason()}),
    )
    .await?;
    Ok(answer)
}

/// The most bytes of a hook payload the gate reads; a larger one is denied
/// (answered, not refused with an HTTP error status).
pub const GATE_BODY_LIMIT: usize = 8 << 20;

/// The stack of the thread the gate's analysis runs on. The analysis bounds its
/// input's size and nesting before it parses ([`flotilla_sessions::shell`]), so
/// its recursion is bounded; this stack is far beyond what that bound needs, and
/// the analysis never runs on a tokio worker (whose 2 MiB stack a deep parse
/// could overflow, which aborts the whole authority).
pub const GATE_STACK_BYTES: usize = 64 << 20;

/// [`flotilla_sessions::policy::decide`] on a thread of its own with a known
/// stack ([`GATE_STACK_BYTES`]). Fails closed: a panic, or a thread that cannot be
/// started, is a deny for this call, and the authority goes on.
async fn decide_isolated(mode: Mode, policy: &Arc<Policy>, call: &ToolCall) -> Decision {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let policy = policy.clone();
    let call = call.clone();
    let spawned = std::thread::Builder::new()
        .name("gate".into())
        .stack_size(GATE_STACK_BYTES)
        .spawn(move || {
            let d = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                flotilla_sessions::policy::decide(mode, &policy, &call)
            }));
            let _ = tx.send(d);
        });
    if let Err(e) = spawned {
        return Decision::Deny {
            reason: format!("the gate failed closed: cannot start its analysis: {e}"),
        };
    }
    match rx.await {
        Ok(Ok(d)) => d,
        Ok(Err(_)) | Err(_) => Decision::Deny {
            reason: "the gate failed closed: its analysis of this call failed".into(),
        },
    }
}

/// `POST /v1/gate/hook`: the gate as a Claude Code hook endpoint. The body is the
/// hook's input JSON (`PreToolUse` or `PermissionRequest`,
/// <https://code.claude.com/docs/en/hooks>); the answer is the hook's output JSON.
/// **Fails closed**: a missing or unknown credential, a body over
/// [`GATE_BODY_LIMIT`] (read no further), a body that does not parse, a store
/// error — every failure answers 200 with a deny, because Claude Code treats an
/// HTTP hook's error status as "go ahead". The credential is checked before the
/// body is read.
#[utoipa::path(post, path = "/v1/gate/hook", request_body(content = Object, description = "Claude Code's hook input"),
    responses((status = 200, body = Object, description = "Claude Code's hook output")))]
pub async fn gate_hook<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // Read (bounded) before anything else only to answer in the payload's own
    // hook event shape; nothing of it is looked at before the credential is.
    let body = axum::body::to_bytes(body, GATE_BODY_LIMIT)
        .await
        .map_err(|_| {
            invalid(format!(
                "the hook payload is larger than {GATE_BODY_LIMIT} bytes, or was cut short"
            ))
        });
    let event_name = body
        .as_ref()
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(b).ok())
        .and_then(|v| HookEvent::parse(v.get("hook_event_name")?.as_str()?))
        .unwrap_or(HookEvent::PreToolUse);
    let answer = async {
        let id = session_caller(&state, &headers).await?;
        let body = body?;
        let input = HookInput::parse(&body).map_err(|e| invalid(e.to_string()))?;
        gate(&state, id, &input).await
    }
    .await
    .unwrap_or_else(|f| HookAnswer::Deny(format!("the gate failed closed: {}", f.message())));
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        flotilla_sessions::hook::render(event_name, &answer).to_string(),
    )
        .into_response()
}

/// The tool name of push questions.
pub const PUSH_TOOL: &str = "Push";

/// What a push request names: the source in the session's tree (`HEAD` or a
/// branch) and the remote's branch (without `refs/heads/`).
fn push_target(
    id: u64,
    remote: Option<&str>,
    refspec: Option<&str>,
) -> Result<(String, String), String> {
    if let Some(r) = remote {
        if r != "origin" {
            return Err(format!(
                "a session pushes only to its repository (`origin`), not to `{r}`"
            ));
        }
    }
    let spec = refspec.unwrap_or("HEAD");
    if spec.starts_with('+') {
        return Err(format!(
            "`{spec}`: force pushes are not offered; push a branch that fast-forwards"
        ));
    }
    let (src, dst) = match spec.split_once(':') {
        Some((s, d)) => (s, Some(d)),
        None => (spec, None),
    };
    let src = if src.is_empty() { "HEAD" } else { src };
    if src != "HEAD" {
        flotilla_sessions::clone_cache::check_ref_name(src)?;
    }
    let dst = match dst {
        Some(d) => d.strip_prefix("refs/heads/").unwrap_or(d).to_string(),
        None if src == "HEAD" => format!("flotilla/session-{id}"),
        None => src.to_string(),
    };
    if dst.starts_with("refs/") {
        return Err(format!("`{dst}`: only branches (refs/heads/…) are pushed"));
    }
    flotilla_sessions::clone_cache::check_ref_name(&dst)?;
    Ok((src.to_string(), dst))
}

/// A push of session `id`: the commits are taken from its tree into the mirror
/// (read as the tree's owner), described, and a question opened (or the open one
/// for exactly this commit and branch reused). Nothing is pushed here: the
/// authority pushes when a human answers allow ([`answer_question`]).
async fn push_request<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    remote: Option<&str>,
    refspec: Option<&str>,
) -> Result<PushResponse, Failure> {
    let sessions = sessions_of(state)?;
    let (src, branch) = push_target(id, remote, refspec).map_err(invalid)?;
    let (doc, _) = load_session(state, id).await?;
    let (Some(tree), Some(base)) = (doc.tree.clone(), doc.base_commit.clone()) else {
        return Err(invalid(format!("session {id} has no tree yet")));
    };
    let url = sessions
        .config
        .repos
        .get(&doc.repo)
        .map(|r| r.url.clone())
        .ok_or_else(|| invalid(format!("repository `{}` is no longer configured", doc.repo)))?;
    let clones = sessions.clones.clone();
    let uid = doc
        .uid
        .ok_or_else(|| invalid(format!("session {id} has no uid yet")))?;
    // The tree's side of the fetch (`git upload-pack`) is run by the launcher as
    // the tree's owner; git reaches it through this relay.
    let quote =
        |p: &std::path::Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let upload_pack = format!(
        "{} serve upload-pack-relay --authority-dir {} --session {id} --uid {uid}",
        quote(&sessions.flotilla_exe),
        quote(&sessions.privileged.authority_dir)
    );
    let (repo, sid) = (doc.repo.clone(), id.to_string());
    let (src2, base2) = (src.clone(), base.clone());
    let candidate = tokio::task::spawn_blocking(move || {
        clones.take_commits(
            &repo,
            &sid,
            std::path::Path::new(&tree),
            &src2,
            &base2,
            &upload_pack,
        )
    })
    .await
    .map_err(|e| invalid(e.to_string()))?
    .map_err(|e| invalid(format!("cannot take `{src}` from the session's tree: {e}")))?;
    if candidate.log.is_empty() {
        return Err(invalid(format!(
            "nothing to push: `{src}` ({}) has no commit beyond the session's base {}",
            &candidate.commit[..12.min(candidate.commit.len())],
            &base[..12.min(base.len())]
        )));
    }
    let input = serde_json::json!({
        "remote": "origin",
        "url": url,
        "branch": branch,
        "commit": candidate.commit,
        "base": base,
        "commits": candidate.log,
        "diffstat": candidate.diffstat,
    });
    let answering = sessions.answers.lock().await;
    let (_, open) = find_question(state, id, PUSH_TOOL, &input).await?;
    let qid = match open {
        Some(q) => q,
        None if open_count(state, id).await? >= MAX_OPEN_QUESTIONS => {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "denied",
                format!(
                    "session {id} already has {MAX_OPEN_QUESTIONS} open questions: denied until a human answers them"
                ),
            ));
        }
        None => {
            open_question(
                state,
                id,
                PUSH_TOOL,
                &input,
                &format!(
                    "push {} commit(s) to origin {branch}: a push leaves the session, a human allows it",
                    candidate.log.len()
                ),
            )
            .await?
        }
    };
    drop(answering);
    event(
        state,
        id,
        serde_json::json!({"kind": "push", "outcome": "asked", "question": qid, "commit": candidate.commit, "branch": branch}),
    )
    .await?;
    Ok(PushResponse {
        outcome: "asked".into(),
        question: qid,
        commit: candidate.commit,
        branch,
        commits: candidate.log,
    })
}

/// Carries out answered push question `qid` of session `session` (its answer
/// already marked used): on allow, pushes exactly the asked commit to the asked
/// branch from the mirror; records what happened on the question and in the
/// session's events, and tells the session. Returns the outcome line.
async fn carry_out_push<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    session: u64,
    qid: u64,
    doc: &mut QuestionDoc,
) -> Result<String, Failure> {
    let sessions = sessions_of(state)?;
    let answer = doc.answer.clone().expect("answered");
    let field = |k: &str| {
        doc.tool_input
            .get(k)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (url, branch, commit) = (field("url"), field("branch"), field("commit"));
    let short = commit[..12.min(commit.len())].to_string();
    let outcome = if answer.decision == "allow" {
        let (sdoc, _) = load_session(state, session).await?;
        let clones = sessions.clones.clone();
        let (u, b, c) = (url.clone(), branch.clone(), commit.clone());
        let pushed = tokio::task::spawn_blocking(move || clones.push(&sdoc.repo, &u, &c, &b)).await;
        match pushed {
            Ok(Ok(summary)) => {
                format!(
                    "pushed {short} to origin {branch}: {}",
                    summary.replace('\n', " ")
                )
            }
            Ok(Err(e)) => format!("the push of {short} to origin {branch} failed: {e}"),
            Err(e) => format!("the push of {short} to origin {branch} failed: {e}"),
        }
    } else {
        format!("the push of {short} to origin {branch} was denied")
    };
    doc.outcome = Some(outcome.clone());
    state
        .store
        .put_question(
            qid,
            serde_json::to_string(&doc).expect("serialises"),
            now_ms(),
        )
        .await?;
    event(
        state,
        session,
        serde_json::json!({"kind": "push", "outcome": if outcome.starts_with("pushed") { "pushed" } else if answer.decision == "allow" { "failed" } else { "denied" }, "question": qid, "commit": commit, "branch": branch, "by": answer.by, "result": outcome}),
    )
    .await?;
    let note = answer.note.map(|n| format!(" ({n})")).unwrap_or_default();
    deliver_detached(
        state,
        session,
        Some(format!(
            "Question {qid} was answered {} by {}{note}: {outcome}.",
            answer.decision, answer.by
        )),
        false,
    )
    .await?;
    Ok(outcome)
}

/// `POST /v1/push`: a session's push (`flotilla push`): see [`push_request`].
#[utoipa::path(post, path = "/v1/push", request_body = PushRequest,
    responses((status = 200, body = PushResponse), (status = 403, body = ApiError), (status = 422, body = ApiError)))]
pub async fn push<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<PushRequest>,
) -> Answer<PushResponse> {
    let id = session_caller(&state, &headers).await?;
    Ok(Json(
        push_request(&state, id, req.remote.as_deref(), req.refspec.as_deref()).await?,
    ))
}

/// A push's remote and refspec, as given.
type PushWords = (Option<String>, Option<String>);

/// `git push [-q] [-u] [REMOTE [REFSPEC]]` through the executor: the remote and
/// refspec, or why it is not a push the authority makes.
fn git_push_words(argv: &[String]) -> Option<Result<PushWords, String>> {
    let rest = match argv {
        [git, push, rest @ ..] if git == "git" && push == "push" => rest,
        _ => return None,
    };
    let mut words = Vec::new();
    for w in rest {
        match w.as_str() {
            "-q" | "--quiet" | "-u" | "--set-upstream" => {}
            o if o.starts_with('-') => {
                return Some(Err(format!(
                    "`git push {o}` is not offered: the authority pushes one branch, without options (`flotilla push [origin] [SRC[:DST]]`)"
                )))
            }
            _ => words.push(w.clone()),
        }
    }
    if words.len() > 2 {
        return Some(Err(
            "one refspec at most (`flotilla push [origin] [SRC[:DST]]`)".into(),
        ));
    }
    let mut it = words.into_iter();
    Some(Ok((it.next(), it.next())))
}

/// One of a session's executor places, given back when dropped.
struct SessionSlot {
    running: Arc<std::sync::Mutex<HashMap<u64, usize>>>,
    id: u64,
}

impl SessionSlot {
    /// A place for session `id` if it holds fewer than `max`.
    fn take(
        running: &Arc<std::sync::Mutex<HashMap<u64, usize>>>,
        id: u64,
        max: usize,
    ) -> Option<SessionSlot> {
        let mut r = running.lock().expect("not poisoned");
        let n = r.entry(id).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(SessionSlot {
            running: running.clone(),
            id,
        })
    }
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut r = self.running.lock().expect("not poisoned");
        if let Some(n) = r.get_mut(&self.id) {
            *n -= 1;
            if *n == 0 {
                r.remove(&self.id);
            }
        }
    }
}

/// `POST /v1/exec`: the executor runs an argv list for the calling session's
/// runtime: an allowlisted read at once; anything else only once a question for
/// that exact argv was answered `allow` (else a question is opened and nothing
/// runs). Every call is journaled in the session's events; output is capped.
#[utoipa::path(post, path = "/v1/exec", request_body = ExecRequest,
    responses((status = 200, body = ExecResponse), (status = 403, body = ApiError)))]
pub async fn exec<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<ExecRequest>,
) -> Answer<ExecResponse> {
    let id = session_caller(&state, &headers).await?;
    let sessions = sessions_of(&state)?;
    if req.argv.is_empty() {
        return Err(invalid("an empty argv"));
    }
    if let Some(words) = git_push_words(&req.argv) {
        // A push is never run in a session's tree: the authority takes the commits
        // and pushes them itself once a human allows it.
        let (remote, refspec) = words.map_err(invalid)?;
        let p = push_request(&state, id, remote.as_deref(), refspec.as_deref()).await?;
        return Ok(Json(ExecResponse {
            outcome: "asked".into(),
            question: Some(p.question),
            status: None,
            timed_out: false,
            stdout: String::new(),
            stderr: format!(
                "push of {} ({} commit(s)) to origin {}: question {} asks a human; the authority pushes when they allow it\n",
                &p.commit[..12.min(p.commit.len())],
                p.commits.len(),
                p.branch,
                p.question
            ),
            outputs: Vec::new(),
        }));
    }
    // A slot first, the session's own and one of all: a refusal for want of one
    // must not use up a human's answer.
    let per_session = sessions.config.executor.max_running_per_session;
    let own = SessionSlot::take(&sessions.executor_running, id, per_session);
    let slot = sessions.executor_slots.try_acquire();
    let (Some(_own), Ok(_slot)) = (own, slot) else {
        event(
            &state,
            id,
            serde_json::json!({"kind": "exec", "argv": req.argv, "outcome": "busy"}),
        )
        .await?;
        return Err(Failure::new(
            StatusCode::TOO_MANY_REQUESTS,
            "busy",
            format!(
                "{} executor runs of this session ([executor] max_running_per_session) or {} in all ([executor] max_running) are already in progress: try again when one ends",
                per_session, sessions.config.executor.max_running
            ),
        ));
    };
    let input = serde_json::json!({ "argv": req.argv });
    let allowed_by = if sessions.allowlist.allows(&req.argv) {
        Some("the executor's read allowlist".to_string())
    } else {
        let _answering = sessions.answers.lock().await;
        let (answered, open) = find_question(&state, id, EXECUTOR_TOOL, &input).await?;
        match answered {
            Some((qid, q)) => {
                let a = use_answer(&state, qid, q).await?;
                if a.decision != "allow" {
                    event(
                        &state,
                        id,
                        serde_json::json!({"kind": "exec", "argv": req.argv, "outcome": "denied", "question": qid}),
                    )
                    .await?;
                    return Err(Failure::new(
                        StatusCode::FORBIDDEN,
                        "denied",
                        format!("question {qid} was answered deny by {}", a.by),
                    ));
                }
                Some(format!("question {qid} answered allow by {}", a.by))
            }
            None => {
                let qid = match open {
                    Some(q) => q,
                    None if open_count(&state, id).await? >= MAX_OPEN_QUESTIONS => {
                        return Err(Failure::new(
                            StatusCode::FORBIDDEN,
                            "denied",
                            format!(
                                "not an allowlisted read, and session {id} already has {MAX_OPEN_QUESTIONS} open questions: denied until a human answers them"
                            ),
                        ));
                    }
                    None => {
                        open_question(&state, id, EXECUTOR_TOOL, &input, "not an allowlisted read")
                            .await?
                    }
                };
                event(
                    &state,
                    id,
                    serde_json::json!({"kind": "exec", "argv": req.argv, "outcome": "asked", "question": qid}),
                )
                .await?;
                return Ok(Json(ExecResponse {
                    outcome: "asked".into(),
                    question: Some(qid),
                    status: None,
                    timed_out: false,
                    stdout: String::new(),
                    stderr: String::new(),
                    outputs: Vec::new(),
                }));
            }
        }
    };
    let timeout = sessions
        .config
        .executor
        .timeout
        .unwrap_or(Duration::from_secs(60));
    // Run by the executor process, with its user's access (never the API's).
    let argv = req.argv.clone();
    let socket = sessions.privileged.executor.clone();
    let ran = tokio::task::spawn_blocking(move || {
        crate::privsep::executor::call(&socket, &argv, timeout)
    })
    .await
    .map_err(|e| invalid(e.to_string()))?
    .map_err(|e| invalid(format!("the executor: {e}")))?;
    let (status, timed_out, out, err) = match ran {
        crate::privsep::executor::ExecReply::Ran {
            code,
            timed_out,
            stdout,
            stderr,
        } => (code, timed_out, stdout, stderr),
        crate::privsep::executor::ExecReply::Error { message } => {
            return Err(invalid(message));
        }
    };
    let cap = sessions.config.output_cap;
    // Each stream capped; a capped one kept whole under its SHA-256 (its id).
    let mut outputs = Vec::new();
    let mut kept = Vec::new();
    let mut shown = |bytes: Vec<u8>| -> String {
        let oid = flotilla_release::artifact::hex(&Sha256::digest(&bytes));
        let c = output::cap(&bytes, cap, &oid);
        if c.truncated {
            outputs.push(oid.clone());
            kept.push((oid, bytes));
        }
        c.text
    };
    let stdout = shown(out);
    let stderr = shown(err);
    for (oid, whole) in kept {
        state.store.put_blob(oid, whole).await?;
    }
    event(
        &state,
        id,
        serde_json::json!({"kind": "exec", "argv": req.argv, "outcome": "ran", "by": allowed_by, "status": status, "timed_out": timed_out, "outputs": outputs}),
    )
    .await?;
    Ok(Json(ExecResponse {
        outcome: "ran".into(),
        question: None,
        status,
        timed_out,
        stdout,
        stderr,
        outputs,
    }))
}

/// `GET /v1/outputs/{id}`: a whole output that was shown capped.
#[utoipa::path(get, path = "/v1/outputs/{id}", params(("id" = String, Path, description = "the output's id (its SHA-256)")),
    responses((status = 200, body = Vec<u8>, content_type = "application/octet-stream"), (status = 404, body = ApiError)))]
pub async fn get_output<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    match state.caller(&headers).await? {
        Principal::Operator { .. } => {}
        Principal::Session { .. } => {
            // A session reads its own outputs only.
            let session = session_caller(&state, &headers).await?;
            // Its own: an executor run of this session kept it (the event's
            // `outputs`, which only the authority writes; never its argv).
            let own = state
                .store
                .session_events(session, 0)
                .await?
                .iter()
                .filter_map(|e| serde_json::from_str::<serde_json::Value>(&e.doc).ok())
                .any(|e| {
                    e["kind"] == "exec"
                        && e["outcome"] == "ran"
                        && e["outputs"]
                            .as_array()
                            .is_some_and(|o| o.iter().any(|x| x.as_str() == Some(id.as_str())))
                });
            if !own {
                return Err(not_found(format!("no output {id} of session {session}")));
            }
        }
        _ => {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "outputs are read by operators and by the session that made them",
            ))
        }
    }
    let bytes = state
        .store
        .blob(id.clone())
        .await?
        .ok_or_else(|| not_found(format!("no output {id}")))?;
    Ok(([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response())
}

/// `POST /v1/alerts/alertmanager`: Alertmanager's webhook (version 4,
/// <https://prometheus.io/docs/alerting/latest/configuration/#webhook_config>),
/// with an `alerts` credential as bearer token. Each firing alert whose own labels
/// match opens one session (deduplicated on fingerprint and `startsAt`: repeats
/// change nothing); a resolved one is appended to its session. Answers at once:
/// sessions boot in the background.
#[utoipa::path(post, path = "/v1/alerts/alertmanager", request_body(content = Object, description = "Alertmanager's webhook payload, version 4"),
    responses((status = 200, body = AlertsResponse), (status = 400, body = ApiError), (status = 403, body = ApiError)))]
pub async fn alertmanager<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Answer<AlertsResponse> {
    match state.caller(&headers).await? {
        Principal::Alerts { .. } | Principal::Operator { .. } => {}
        _ => {
            return Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only an alert sender may post alerts",
            ))
        }
    }
    let sessions = sessions_of(&state)?;
    let Some(cfg) = sessions.config.alerts.clone() else {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            "alerts-off",
            format!("alerts are off: {SESSIONS_CONFIG_FILE} has no [alerts]"),
        ));
    };
    let hook = flotilla_sessions::alerts::parse(&body).map_err(|e| invalid(e.to_string()))?;
    let mut out = AlertsResponse {
        opened: Vec::new(),
        updated: Vec::new(),
        unchanged: 0,
    };
    for alert in &hook.alerts {
        if !sessions.matchers.iter().all(|m| m.matches(&alert.labels)) {
            out.unchanged += 1;
            continue;
        }
        let key = alert.dedup_key();
        let firing = alert.is_firing();
        if firing {
            let req = CreateSessionRequest {
                repo: cfg.repo.clone(),
                host: None,
                mode: Some(cfg.mode),
                prompt: None,
            };
            let (id, created) = create(&state, req, "alertmanager".into(), Some(key)).await?;
            if created {
                event(
                    &state,
                    id,
                    serde_json::json!({"kind": "alert", "status": "firing", "fingerprint": alert.fingerprint}),
                )
                .await?;
                out.opened.push(id);
                let state2 = state.clone();
                let message = alert.message();
                tokio::spawn(async move {
                    if let Err(e) = deliver(&state2, id, Some(message), false).await {
                        tracing::error!("session {id}: booting for an alert: {}", e.message());
                    }
                });
            } else {
                out.unchanged += 1;
            }
        } else {
            // Resolved: append to the session it opened, if any (never a new one).
            let found = state.store.sessions().await?.into_iter().find(|r| {
                serde_json::from_str::<SessionDoc>(&r.doc)
                    .is_ok_and(|d| d.alert.as_deref() == Some(key.as_str()))
            });
            match found {
                Some(r) => {
                    let already = state
                        .store
                        .session_events(r.id, 0)
                        .await?
                        .iter()
                        .any(|e| e.doc.contains("\"status\":\"resolved\""));
                    if already {
                        out.unchanged += 1;
                    } else {
                        event(
                            &state,
                            r.id,
                            serde_json::json!({"kind": "alert", "status": "resolved", "fingerprint": alert.fingerprint, "message": alert.resolved_message()}),
                        )
                        .await?;
                        out.updated.push(r.id);
                    }
                }
                None => out.unchanged += 1,
            }
        }
    }
    Ok(Json(out))
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

/// `POST /v1/credentials/alerts`: makes a credential that may only post alerts.
#[utoipa::path(post, path = "/v1/credentials/alerts", request_body = AlertsCredentialRequest,
    responses((status = 200, body = AlertsCredentialResponse), (status = 403, body = ApiError)))]
pub async fn create_alerts_credential<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<AlertsCredentialRequest>,
) -> Answer<AlertsCredentialResponse> {
    state.operator(&headers).await?;
    if req.name.trim().is_empty() {
        return Err(invalid("an empty sender name"));
    }
    let credential = crate::auth::new_secret("flt-alerts-");
    state
        .store
        .create_credential(
            crate::auth::hash_secret(&credential),
            Principal::Alerts {
                name: req.name.clone(),
            },
            now_ms(),
        )
        .await?;
    Ok(Json(AlertsCredentialResponse {
        name: req.name,
        credential,
    }))
}
