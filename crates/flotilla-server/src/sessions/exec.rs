//! `POST /v1/exec` and `GET /v1/outputs/{id}`: allowlisted programs run by the
//! executor for a session, their capped outputs.

use super::gate::session_caller;
use super::push::{git_push_words, push_request};
use super::questions::{
    find_question, open_count, open_question, use_answer, EXECUTOR_TOOL, MAX_OPEN_QUESTIONS,
};
use super::records::{event, sessions_of};
use crate::failure::{invalid, not_found};
use flotilla_api::sessions::{ExecRequest, ExecResponse};

use crate::api::ApiError;
use crate::failure::{Answer, Failure};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use flotilla_sessions::output;
use flotilla_store::authority::{AuthorityStore, Principal};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

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
        crate::blobs::routes::put_bytes(&state, oid, &whole).await?;
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
    crate::blobs::routes::serve(&state, &id, &headers, "output").await
}
