//! Revisions and the selection: publishing, selecting, history, diffs, and each
//! host's long-polled snapshot of the selection and its reports.

use crate::api::{self, ApiError};
use crate::failure::{Answer, Failure};
use crate::longpoll::{park, wait_of, PollQuery};
use crate::metrics::AgentRevision;
use crate::state::{selection_dto, AppState};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_model::inventory::HostRole;
use flotilla_model::topology::Topology;
use flotilla_store::authority::{AuthorityStore, HostReportRecord, NewRevision, SelectOutcome};
use flotilla_store::StoreError;
use std::sync::Arc;

/// The largest revision a publish may carry (64 MiB of JSON).
pub const PUBLISH_LIMIT: usize = 64 << 20;

/// `GET /v1/hosts/{host}/snapshot`: the host's view of the selected revision, long-polled.
#[utoipa::path(get, path = "/v1/hosts/{host}/snapshot", params(("host" = String, Path, description = "the host"), PollQuery),
    responses((status = 200, body = api::SnapshotResponse), (status = 403, body = ApiError)))]
pub async fn snapshot<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    Query(q): Query<PollQuery>,
    headers: HeaderMap,
) -> Answer<api::SnapshotResponse> {
    let epoch = state.revocation_epoch();
    state
        .for_host(&headers, &host, true, "read only its own host's snapshot")
        .await?;
    let wait = wait_of(&q.wait)?;
    // Consul adds up to wait/16 of jitter so that polls do not come back in step.
    let mut r = [0u8; 2];
    getrandom::fill(&mut r).ok();
    let jitter = (wait / 16).mul_f64(u16::from_le_bytes(r) as f64 / 65536.0);
    park(&state.index, q.index, wait + jitter, &state.metrics).await;
    // Asked again after the wait when credentials were revoked meanwhile (here or
    // by another authority): a revoked one gets nothing. Not otherwise: 10,000
    // polls woken at once would each look their credential up again.
    if state.revocation_epoch() != epoch {
        state
            .for_host(&headers, &host, true, "read only its own host's snapshot")
            .await?;
    }
    let Some(cur) = state.current() else {
        return Ok(Json(api::SnapshotResponse {
            index: 0,
            revision: None,
            role: None,
            snapshot: None,
            topology: None,
        }));
    };
    let view = cur.topology.host_view(&host);
    let topology = match view.topology {
        Some(doc) => Some(serde_json::to_value(&doc).map_err(|e| {
            Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?),
        None => None,
    };
    Ok(Json(api::SnapshotResponse {
        index: cur.selection.index,
        revision: Some(cur.selection.digest.clone()),
        role: Some(
            match view.role {
                HostRole::Control => "control",
                HostRole::Component => "component",
            }
            .into(),
        ),
        snapshot: Some(view.snapshot),
        topology,
    }))
}

/// `POST /v1/hosts/{host}/report`: the agent of `host` reports what it measured.
#[utoipa::path(post, path = "/v1/hosts/{host}/report", params(("host" = String, Path, description = "the host")), request_body = api::AgentReport,
    responses((status = 200, body = Object), (status = 403, body = ApiError)))]
pub async fn report<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    headers: HeaderMap,
    Json(report): Json<api::AgentReport>,
) -> Answer<serde_json::Value> {
    state
        .for_host(&headers, &host, false, "write only its own host's reports")
        .await?;
    let received_ms = now_ms();
    let text = serde_json::to_string(&report)
        .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string()))?;
    state
        .report_writer()
        .put(HostReportRecord {
            host: host.clone(),
            revision: report.revision.clone(),
            report: text,
            received_ms,
        })
        .await?;
    crate::notify::triggers::report_received(&state, &host, &report, received_ms);
    let previous = state
        .last_reports
        .lock()
        .expect("not poisoned")
        .insert(host.clone(), (received_ms, report.revision.clone()));
    state.ui.hub.changed(crate::ui::hub::Topic::Fleet);
    if let Some((_, Some(old))) = previous {
        if Some(&old) != report.revision.as_ref() {
            state.metrics.agent_revision.remove(&AgentRevision {
                host: host.clone(),
                revision: old,
            });
        }
    }
    if let Some(rev) = report.revision {
        state
            .metrics
            .agent_revision
            .get_or_create(&AgentRevision {
                host,
                revision: rev,
            })
            .set(1);
    }
    Ok(Json(serde_json::json!({ "received_ms": received_ms })))
}

/// `GET /v1/revisions` (operator): the revision history and the selection log.
#[utoipa::path(get, path = "/v1/revisions", responses((status = 200, body = api::HistoryResponse), (status = 403, body = ApiError)))]
pub async fn history<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<api::HistoryResponse> {
    state.operator(&headers).await?;
    Ok(Json(history_of(&state).await?))
}

/// The revisions, newest first, each marked when selected, and the selection log
/// (`GET /v1/revisions` and the dashboard).
pub(crate) async fn history_of<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<api::HistoryResponse, Failure> {
    let selected = state.current().map(|c| c.selection.digest);
    let revisions = state
        .store
        .revisions()
        .await?
        .into_iter()
        .map(|r| api::RevisionSummaryDto {
            selected: selected.as_deref() == Some(r.digest.as_str()),
            revision: r.digest,
            created_ms: r.created_ms,
            published_by: r.published_by,
        })
        .collect();
    let selections = state
        .store
        .selections()
        .await?
        .iter()
        .map(selection_dto)
        .collect();
    Ok(api::HistoryResponse {
        revisions,
        selections,
    })
}

fn outcome_answer(digest: String, outcome: SelectOutcome) -> Result<api::SelectResponse, Failure> {
    match outcome {
        SelectOutcome::Selected(s) => Ok(api::SelectResponse {
            revision: digest,
            changed: true,
            selection: selection_dto(&s),
        }),
        SelectOutcome::Unchanged(s) => Ok(api::SelectResponse {
            revision: digest,
            changed: false,
            selection: selection_dto(&s),
        }),
        SelectOutcome::Conflict { current } => Err(Failure(
            StatusCode::CONFLICT,
            ApiError {
                code: "conflict".into(),
                message: format!(
                    "the selected revision is {}, not the one expected: nothing changed",
                    current.as_deref().unwrap_or("none")
                ),
                current,
            },
        )),
    }
}

/// `POST /v1/revisions` (operator): store a validated topology as a revision and
/// select it, in one transaction.
#[utoipa::path(post, path = "/v1/revisions", request_body = api::PublishRequest, responses(
    (status = 200, body = api::SelectResponse), (status = 400, body = ApiError), (status = 409, body = ApiError)))]
pub async fn publish<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::PublishRequest>,
) -> Answer<api::SelectResponse> {
    let by = state.operator(&headers).await?;
    let text = serde_json::to_string(&req.topology)
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
    let topology = Topology::from_revision(&text).map_err(|e| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("not a valid topology: {e}"),
        )
    })?;
    let digest = topology.digest().to_string();
    let outcome = state
        .store
        .publish(
            NewRevision {
                digest: digest.clone(),
                content: topology.revision_json(),
                created_ms: now_ms(),
                published_by: by,
            },
            req.expect,
        )
        .await?;
    if let SelectOutcome::Selected(s) = &outcome {
        tracing::info!(revision = %digest, index = s.index, "published and selected");
        state.install(s.clone(), Arc::new(topology));
        crate::cluster::announce(&state, crate::cluster::Wake::Selection { index: s.index }).await;
    }
    outcome_answer(digest, outcome).map(Json)
}

/// `PUT /v1/selection` (operator): select an existing revision.
#[utoipa::path(put, path = "/v1/selection", request_body = api::SelectRequest, responses(
    (status = 200, body = api::SelectResponse), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn select<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::SelectRequest>,
) -> Answer<api::SelectResponse> {
    let by = state.operator(&headers).await?;
    Ok(Json(select_revision(&state, by, req).await?))
}

/// Selects revision `req.revision` as `by`, only if `req.expect` (when given) is
/// the one selected now: 409 `conflict` (with the current one) otherwise, and
/// nothing changes (`PUT /v1/selection` and the dashboard).
pub(crate) async fn select_revision<S: AuthorityStore>(
    state: &AppState<S>,
    by: String,
    req: api::SelectRequest,
) -> Result<api::SelectResponse, Failure> {
    let rev = state
        .store
        .revision(req.revision.clone())
        .await?
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no revision {}", req.revision),
            )
        })?;
    let topology = Topology::from_revision(&rev.content).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("stored revision {} does not parse: {e}", rev.digest),
        )
    })?;
    let outcome = match state
        .store
        .select(req.revision.clone(), req.expect, now_ms(), by)
        .await
    {
        Err(StoreError::UnknownRevision(r)) => {
            return Err(Failure::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no revision {r}"),
            ))
        }
        other => other?,
    };
    if let SelectOutcome::Selected(s) = &outcome {
        tracing::info!(revision = %rev.digest, index = s.index, "selected");
        state.install(s.clone(), Arc::new(topology));
        crate::cluster::announce(state, crate::cluster::Wake::Selection { index: s.index }).await;
    }
    outcome_answer(rev.digest, outcome)
}

async fn load<S: AuthorityStore>(
    state: &AppState<S>,
    rev: &str,
) -> Result<(flotilla_store::authority::RevisionRecord, Topology), Failure> {
    let r = state
        .store
        .revision(rev.to_string())
        .await?
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                "not-found",
                format!("no revision {rev}"),
            )
        })?;
    let t = Topology::from_revision(&r.content).map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            format!("stored revision {rev} does not parse: {e}"),
        )
    })?;
    Ok((r, t))
}

/// `GET /v1/revisions/{rev}` (operator): one revision whole.
#[utoipa::path(get, path = "/v1/revisions/{rev}", params(("rev" = String, Path, description = "the revision, sha256:…")),
    responses((status = 200, body = api::RevisionDto), (status = 403, body = ApiError), (status = 404, body = ApiError)))]
pub async fn revision<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(rev): Path<String>,
    headers: HeaderMap,
) -> Answer<api::RevisionDto> {
    state.operator(&headers).await?;
    let (r, _) = load(&state, &rev).await?;
    Ok(Json(api::RevisionDto {
        topology: serde_json::from_str(&r.content).map_err(|e| {
            Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?,
        revision: r.digest,
        created_ms: r.created_ms,
        published_by: r.published_by,
    }))
}

/// `GET /v1/revisions/{a}/diff/{b}` (operator): what changed from `a` to `b`.
#[utoipa::path(get, path = "/v1/revisions/{a}/diff/{b}", params(("a" = String, Path, description = "from"), ("b" = String, Path, description = "to")),
    responses((status = 200, body = api::DiffResponse), (status = 404, body = ApiError)))]
pub async fn diff<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path((a, b)): Path<(String, String)>,
    headers: HeaderMap,
) -> Answer<api::DiffResponse> {
    state.operator(&headers).await?;
    Ok(Json(diff_of(&state, &a, &b).await?))
}

/// What changed from revision `a` to `b` (`GET /v1/revisions/{a}/diff/{b}` and the
/// dashboard); 404 when either is unknown.
pub(crate) async fn diff_of<S: AuthorityStore>(
    state: &AppState<S>,
    a: &str,
    b: &str,
) -> Result<api::DiffResponse, Failure> {
    let (ra, ta) = load(state, a).await?;
    let (rb, tb) = load(state, b).await?;
    let changes = crate::diff::changes(&ta, &tb);
    Ok(api::DiffResponse {
        from: ra.digest,
        to: rb.digest,
        changes,
    })
}
