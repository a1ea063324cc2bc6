//! The gate's HTTP front door (`POST /v1/gate/hook`): who is calling, the decision
//! made on a stack of its own with the body capped, and the answer in Claude Code's
//! hook format.

use super::questions::{find_question, open_count, open_question, use_answer, MAX_OPEN_QUESTIONS};
use super::records::{event, load_session, save_session, sessions_of};
use crate::failure::invalid;
use crate::failure::Failure;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use flotilla_exec::this_process::now_ms;
use flotilla_sessions::hook::{HookAnswer, HookEvent, HookInput};
use flotilla_sessions::policy::Policy;
use flotilla_sessions::{Decision, Mode, ToolCall};
use flotilla_store::authority::{AuthorityStore, Principal};
use std::sync::Arc;

/// The session whose runtime calls: its credential must be the one its current
/// runtime was given, and that runtime must still run (a credential dies with its
/// runtime: a copy taken from an earlier one is worth nothing).
pub(crate) async fn session_caller<S: AuthorityStore>(
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
    let sessions = super::records::sessions_of(state)?;
    let current = doc.runtime.as_ref().is_some_and(|r| sessions.alive(r))
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
pub(crate) async fn gate<S: AuthorityStore>(
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

/// The most bytes of an oversized hook payload read and thrown away after
/// [`GATE_BODY_LIMIT`] (32 MiB), so that its sender, still writing, gets the deny
/// instead of a reset connection; beyond it the connection is closed.
pub const GATE_DRAIN_LIMIT: usize = 32 << 20;

/// A hook payload of at most [`GATE_BODY_LIMIT`] bytes; a larger one is an error
/// once the rest (up to [`GATE_DRAIN_LIMIT`]) has been read and dropped.
async fn read_bounded(body: axum::body::Body) -> Result<Vec<u8>, Failure> {
    use futures_util::StreamExt as _;
    let too_large = || {
        invalid(format!(
            "the hook payload is larger than {GATE_BODY_LIMIT} bytes, or was cut short"
        ))
    };
    let mut stream = body.into_data_stream();
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| too_large())?;
        seen += chunk.len();
        if seen <= GATE_BODY_LIMIT {
            kept.extend_from_slice(&chunk);
        } else if seen > GATE_BODY_LIMIT + GATE_DRAIN_LIMIT {
            break;
        }
    }
    if seen > GATE_BODY_LIMIT {
        return Err(too_large());
    }
    Ok(kept)
}

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
    let body = read_bounded(body).await;
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
