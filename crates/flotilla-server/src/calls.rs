//! Calls: an operator's call queued for a host's agent, the agent's long poll for
//! them and its reply, and waiting on a call's outcome.

use crate::api::{self, ApiError};
use crate::failure::{Answer, Failure};
use crate::longpoll::{wait_of, WaitQuery};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Principal};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::watch;

/// The envelope a call is stored in.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    request: serde_json::Value,
    deadline_ms: i64,
}

/// `POST /v1/hosts/{host}/calls` (operator): queue a call for the host's agent.
#[utoipa::path(post, path = "/v1/hosts/{host}/calls", params(("host" = String, Path, description = "the host")),
    request_body = api::EnqueueRequest, responses((status = 200, body = api::Enqueued), (status = 403, body = ApiError)))]
pub async fn enqueue_call<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    headers: HeaderMap,
    Json(req): Json<api::EnqueueRequest>,
) -> Answer<api::Enqueued> {
    state.operator(&headers).await?;
    let id = queue(&state, host, req.request, req.deadline_ms).await?;
    Ok(Json(api::Enqueued { id }))
}

/// Stores `request` (a host-mode request's JSON) for `host`'s agent, to be refused
/// by it after `deadline_ms` (ms since the Unix epoch), and wakes that agent's poll;
/// the call's id. What `POST /v1/hosts/{host}/calls` does, for callers inside the
/// authority (its own controller).
///
/// # Errors
/// The store's.
pub(crate) async fn queue<S: AuthorityStore>(
    state: &AppState<S>,
    host: String,
    request: serde_json::Value,
    deadline_ms: i64,
) -> Result<u64, Failure> {
    let text = serde_json::to_string(&Stored {
        request,
        deadline_ms,
    })
    .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    let host_of = host.clone();
    let id = state
        .store
        .enqueue_call(host.clone(), text, now_ms())
        .await?;
    let tx = {
        let mut calls = state.calls.lock().expect("not poisoned");
        calls
            .entry(host)
            .or_insert_with(|| watch::Sender::new(0))
            .clone()
    };
    tx.send_replace(id);
    crate::cluster::announce(state, crate::cluster::Wake::Call { host: host_of, id }).await;
    Ok(id)
}

/// Query of a calls long poll.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct CallsQuery {
    /// Only calls with a greater id.
    #[serde(default)]
    pub after: u64,
    /// How long to wait for one: `30s`, `500ms` (at most 5m).
    #[serde(default)]
    pub wait: Option<String>,
}

/// `GET /v1/hosts/{host}/calls` (the host's agent): its unanswered calls, long-polled.
#[utoipa::path(get, path = "/v1/hosts/{host}/calls", params(("host" = String, Path, description = "the host"), CallsQuery),
    responses((status = 200, body = api::CallsResponse), (status = 403, body = ApiError)))]
pub async fn pending_calls<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    Query(q): Query<CallsQuery>,
    headers: HeaderMap,
) -> Answer<api::CallsResponse> {
    state
        .for_host(&headers, &host, true, "read only its own host's calls")
        .await?;
    let wait = wait_of(&q.wait)?;
    let mut rx = state.host_calls(&host);
    let deadline = Instant::now() + wait;
    loop {
        let pending = state.store.pending_calls(host.clone(), q.after, 64).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        if !pending.is_empty() || left.is_zero() {
            // Asked again after a wait: a credential revoked meanwhile gets nothing.
            state
                .for_host(&headers, &host, true, "read only its own host's calls")
                .await?;
            let calls = pending
                .into_iter()
                .filter_map(|c| {
                    let s: Stored = serde_json::from_str(&c.call).ok()?;
                    Some(api::CallDto {
                        id: c.id,
                        request: s.request,
                        deadline_ms: s.deadline_ms,
                    })
                })
                .collect();
            let latest = state.store.last_call_id().await?;
            return Ok(Json(api::CallsResponse { calls, latest }));
        }
        rx.borrow_and_update();
        let _waiting = crate::metrics::Held::new(&state.metrics.longpoll_waiters);
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

/// `POST /v1/calls/{id}/reply` (the agent of the call's host): its answer, once.
#[utoipa::path(post, path = "/v1/calls/{id}/reply", params(("id" = u64, Path, description = "the call")),
    request_body = api::ReplyRequest, responses((status = 200, body = Object), (status = 403, body = ApiError), (status = 409, body = ApiError)))]
pub async fn reply_call<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    headers: HeaderMap,
    Json(req): Json<api::ReplyRequest>,
) -> Answer<serde_json::Value> {
    let Principal::Agent { host } = state.caller(&headers).await? else {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only the host's agent answers its calls",
        ));
    };
    let text = serde_json::to_string(&req.response)
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    if !state
        .store
        .put_reply(id, host.clone(), text, now_ms())
        .await?
    {
        // Another host's call is an authorisation answer (403), whether or not it
        // exists; this host's call answered already, a conflict (409).
        return Err(match state.store.call(id).await? {
            Some(c) if c.host == host => Failure::new(
                StatusCode::CONFLICT,
                "conflict",
                format!("call {id} of `{host}` was already answered"),
            ),
            _ => Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("call {id} is not a call of `{host}`: only its host's agent answers it"),
            ),
        });
    }
    // A step of an operation changed the host: reports measured before it are old.
    if let Some(call) = state.store.call(id).await? {
        if let Some(op) = serde_json::from_str::<serde_json::Value>(&call.call)
            .ok()
            .as_ref()
            .and_then(operation_of)
        {
            state
                .last_steps
                .lock()
                .expect("not poisoned")
                .insert(host.clone(), (op, now_ms()));
        }
    }
    state.replies.send_modify(|n| *n += 1);
    crate::cluster::announce(&state, crate::cluster::Wake::Reply { id }).await;
    Ok(Json(serde_json::json!({ "id": id })))
}

/// `GET /v1/calls/{id}` (operator): a call and its answer, long-polled until it has one.
#[utoipa::path(get, path = "/v1/calls/{id}", params(("id" = u64, Path, description = "the call"), WaitQuery),
    responses((status = 200, body = api::CallStatus), (status = 404, body = ApiError)))]
pub async fn call_status<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(id): Path<u64>,
    Query(q): Query<WaitQuery>,
    headers: HeaderMap,
) -> Answer<api::CallStatus> {
    state.operator(&headers).await?;
    let wait = wait_of(&q.wait)?;
    Ok(Json(answer(&state, id, wait).await?))
}

/// Call `id` and its answer, waiting at most `wait` for one (the answer is `None`
/// until its agent replied). What `GET /v1/calls/{id}?wait=` answers, for callers
/// inside the authority.
///
/// # Errors
/// 404 when there is no such call; the store's.
pub(crate) async fn answer<S: AuthorityStore>(
    state: &AppState<S>,
    id: u64,
    wait: std::time::Duration,
) -> Result<api::CallStatus, Failure> {
    let deadline = Instant::now() + wait;
    let mut rx = state.replies.subscribe();
    loop {
        rx.borrow_and_update();
        let Some(c) = state.store.call(id).await? else {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no call {id}"),
            ));
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if c.reply.is_some() || left.is_zero() {
            return Ok(api::CallStatus {
                id,
                host: c.host,
                response: c.reply.and_then(|r| serde_json::from_str(&r).ok()),
            });
        }
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

/// The operation a host-mode call is a step of (its `operation` field, wherever the
/// request nests it); `None` for an observation or a check.
fn operation_of(call: &serde_json::Value) -> Option<String> {
    match call {
        serde_json::Value::Object(map) => map
            .get("operation")
            .and_then(|v| v.as_str())
            .filter(|op| op.starts_with("op-"))
            .map(str::to_string)
            .or_else(|| map.values().find_map(operation_of)),
        serde_json::Value::Array(items) => items.iter().find_map(operation_of),
        _ => None,
    }
}
