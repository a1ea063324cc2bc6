//! The sessions' and questions' routes: create, list, read, events, messages, mode,
//! stopping a runtime, listing and answering questions.

use super::docs::derive_state;
use super::lifecycle::{create, deliver_detached, end_runtime, kill_runtime, reconcile};
use super::push::{carry_out_push, PUSH_TOOL};
use super::questions::EXECUTOR_TOOL;
use super::records::{event, load_session, open_questions, sessions_of};
use crate::failure::{invalid, not_found};
use flotilla_api::sessions::{
    AnswerDoc, AnswerRequest, CreateSessionRequest, EventsQuery, MessageRequest, ModeRequest,
    QuestionDoc, QuestionDto, QuestionsResponse, SessionDto, SessionEventDto,
    SessionEventsResponse, SessionsResponse,
};

use crate::api::ApiError;
use crate::failure::{Answer, Failure};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_sessions::Mode;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

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
    Ok(Json(SessionsResponse {
        sessions: all_sessions(&state).await?,
    }))
}

/// Every session, reconciled, newest first (`GET /v1/sessions` and the dashboard).
pub(crate) async fn all_sessions<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<SessionDto>, Failure> {
    sessions_of(state)?;
    let mut out = Vec::new();
    for rec in state.store.sessions().await? {
        out.push(dto(state, rec.id).await?);
    }
    Ok(out)
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
    Ok(Json(SessionEventsResponse {
        events: events_of(&state, id, q.after).await?,
    }))
}

/// Session `id`'s events after sequence number `after`, oldest first; an event
/// that does not parse is its text as a JSON string.
pub(crate) async fn events_of<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    after: u64,
) -> Result<Vec<SessionEventDto>, Failure> {
    load_session(state, id).await?;
    Ok(state
        .store
        .session_events(id, after)
        .await?
        .into_iter()
        .map(|e| SessionEventDto {
            seq: e.seq,
            at_ms: e.at_ms,
            event: serde_json::from_str(&e.doc).unwrap_or(serde_json::Value::String(e.doc)),
        })
        .collect())
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
    Ok(Json(send(&state, id, req.text).await?))
}

/// Gives session `id` a message (boots a runtime if none runs); the session after.
pub(crate) async fn send<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    text: String,
) -> Result<SessionDto, Failure> {
    if text.trim().is_empty() {
        return Err(invalid("an empty message"));
    }
    deliver_detached(state, id, Some(text), false).await?;
    dto(state, id).await
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
    Ok(Json(stop(&state, id).await?))
}

/// Tears session `id`'s runtime down, if one runs; the session after.
pub(crate) async fn stop<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<SessionDto, Failure> {
    let sessions = sessions_of(state)?;
    {
        let lock = sessions.lock_of(id);
        let _held = lock.lock().await;
        let (mut doc, _) = load_session(state, id).await?;
        if let Some(rt) = doc.runtime.clone() {
            // Not stopped (the cluster did not answer): nothing is recorded, and
            // the caller is told.
            kill_runtime(sessions, &rt).await.map_err(|e| {
                Failure::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "runtime",
                    format!("session {id}: {e}; it still runs"),
                )
            })?;
            let ev =
                serde_json::json!({"kind": "runtime-torn-down", "why": "stopped", "pid": rt.pid});
            end_runtime(state, id, &mut doc, "stopped", ev).await?;
        }
    }
    dto(state, id).await
}

/// `GET /v1/questions`: every question, newest first.
#[utoipa::path(get, path = "/v1/questions", responses((status = 200, body = QuestionsResponse)))]
pub async fn list_questions<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<QuestionsResponse> {
    state.operator(&headers).await?;
    Ok(Json(QuestionsResponse {
        questions: all_questions(&state).await?,
    }))
}

/// Every question, as the store lists them (`GET /v1/questions` and the dashboard).
pub(crate) async fn all_questions<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<QuestionDto>, Failure> {
    Ok(open_questions(state)
        .await?
        .into_iter()
        .map(|(id, session, asked_ms, doc)| QuestionDto {
            id,
            session,
            asked_ms,
            doc,
        })
        .collect())
}

/// Question `id` (404 when there is none).
pub(crate) async fn question_of<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<QuestionDto, Failure> {
    let rec = state
        .store
        .question(id)
        .await?
        .ok_or_else(|| not_found(format!("no question {id}")))?;
    state
        .cluster
        .read_at(flotilla_store::authority::Doc::Question, id, rec.version);
    let doc: QuestionDoc = serde_json::from_str(&rec.doc)
        .map_err(|e| invalid(format!("question {id} does not parse: {e}")))?;
    Ok(QuestionDto {
        id,
        session: rec.session,
        asked_ms: rec.created_ms,
        doc,
    })
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
    Ok(Json(answer(&state, id, by, req).await?))
}

/// Answers question `id` as `by` (once: 409 `answered` when it already is) and
/// resumes its session; the question after.
pub(crate) async fn answer<S: AuthorityStore>(
    state: &Arc<AppState<S>>,
    id: u64,
    by: String,
    req: AnswerRequest,
) -> Result<QuestionDto, Failure> {
    sessions_of(state)?;
    if req.decision != "allow" && req.decision != "deny" {
        return Err(invalid(format!(
            "the answer is `allow` or `deny`, not `{}`",
            req.decision
        )));
    }
    let answering = sessions_of(state)?.answers.lock().await;
    let QuestionDto {
        session,
        asked_ms,
        mut doc,
        ..
    } = question_of(state, id).await?;
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
    super::records::save_question(state, id, &doc).await?;
    drop(answering);
    state.ui.hub.changed(crate::ui::hub::Topic::Questions);
    event(
        state,
        session,
        serde_json::json!({"kind": "answer", "question": id, "decision": req.decision, "by": by, "note": req.note}),
    )
    .await?;
    if push {
        carry_out_push(state, session, id, &mut doc).await?;
    } else if doc.tool_name != EXECUTOR_TOOL {
        deliver_detached(state, session, None, true).await?;
    }
    Ok(QuestionDto {
        id,
        session,
        asked_ms,
        doc,
    })
}

pub(crate) async fn dto<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
) -> Result<SessionDto, Failure> {
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
