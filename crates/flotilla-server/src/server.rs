//! The authority's HTTP service: routes, authorisation, long-polled snapshots.
//!
//! Who may do what (every `/v1` route but `ca.pem`, `join` and `openapi.json` needs a
//! bearer credential):
//!
//! | route | operator | agent of host H |
//! | --- | --- | --- |
//! | `GET /v1/hosts/{host}/snapshot` | any host | H only |
//! | `POST /v1/hosts/{host}/report` | — | H only |
//! | `GET`/`POST /v1/hosts/{host}/release` | read any host's | H only |
//! | `GET /v1/blobs/{sha256}` | yes | yes (artifacts are not secret; their signatures are what agents trust) |
//! | revisions, selection, tokens, status, releases, blob uploads, rollouts, `/metrics` | yes | — (403) |
//!
//! The selection (which revision is desired) is kept in memory beside the store, so a
//! long poll never touches the database; it is loaded at start and replaced after
//! each committed publish or select, then the waiting polls are woken.

use crate::api::{self, ApiError};
use crate::auth;
use crate::authority::AuthorityError;
use crate::metrics::{AgentRevision, Metrics, Route, RouteLabels};
use crate::releases;
use crate::sessions;
use axum::extract::{MatchedPath, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use flotilla_model::inventory::HostRole;
use flotilla_model::topology::Topology;
use flotilla_store::authority::{
    AuthorityStore, HostReportRecord, NewJoinToken, NewRevision, Principal, Redeem, SelectOutcome,
    Selection,
};
use flotilla_store::StoreError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The longest a snapshot long poll waits (5 min).
pub const MAX_WAIT: Duration = Duration::from_secs(300);
/// The largest revision a publish may carry (64 MiB of JSON).
pub const PUBLISH_LIMIT: usize = 64 << 20;

/// Counts a waiting long poll for as long as it lives: a client that goes away
/// mid-poll drops the handler at its `.await`, and the count still comes down.
pub(crate) struct Waiting<'a>(&'a prometheus_client::metrics::gauge::Gauge);

impl<'a> Waiting<'a> {
    pub(crate) fn new(g: &'a prometheus_client::metrics::gauge::Gauge) -> Waiting<'a> {
        g.inc();
        Waiting(g)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The wait when the request names none (30 s).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// Settings of the service.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The CA certificate clients pin, PEM (served at `/v1/ca.pem`).
    pub ca_pem: String,
    /// Its pin, `sha256:<hex>`.
    pub ca_hash: String,
    /// A host whose agent has not reported for this long is `unreachable`.
    pub report_deadline: Duration,
    /// Agent sessions (`sessions.toml`), or `None`: off.
    pub sessions: Option<crate::sessions::SessionsSetup>,
}

pub(crate) use flotilla_exec::this_process::now_ms;

/// The selected revision, parsed once.
#[derive(Clone)]
struct Current {
    selection: Selection,
    topology: Arc<Topology>,
}

/// Shared state of the service.
pub struct AppState<S> {
    pub(crate) store: S,
    settings: Settings,
    pub(crate) releases: crate::releases::Releases,
    pub(crate) sessions: Option<crate::sessions::Sessions>,
    current: RwLock<Option<Current>>,
    index: watch::Sender<u64>,
    principals: Mutex<HashMap<String, Principal>>,
    last_reports: Mutex<HashMap<String, (i64, Option<String>)>>,
    /// Per host: the id of the last call queued for it (wakes its agent's poll).
    calls: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// Bumped at every reply (wakes whoever awaits an answer).
    replies: watch::Sender<u64>,
    /// The metrics.
    pub metrics: Metrics,
}

/// An error answer.
#[derive(Debug)]
pub struct Failure(StatusCode, ApiError);

impl Failure {
    pub(crate) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Failure {
        Failure(
            status,
            ApiError {
                code: code.into(),
                message: message.into(),
                current: None,
            },
        )
    }

    /// The error's message.
    pub(crate) fn message(&self) -> &str {
        &self.1.message
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(self.1)).into_response()
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Failure {
        tracing::error!("store: {e}");
        Failure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            format!("the authority's store failed: {e}"),
        )
    }
}

pub(crate) type Answer<T> = Result<Json<T>, Failure>;

fn selection_dto(s: &Selection) -> api::SelectionDto {
    api::SelectionDto {
        index: s.index,
        revision: s.digest.clone(),
        selected_ms: s.selected_ms,
        selected_by: s.selected_by.clone(),
    }
}

impl<S: AuthorityStore> AppState<S> {
    /// Loads the current selection from `store`.
    ///
    /// # Errors
    /// [`AuthorityError::Store`] when the store cannot be read,
    /// [`AuthorityError::CorruptRevision`] when its selected revision does not parse.
    pub async fn new(store: S, settings: Settings) -> Result<Arc<AppState<S>>, AuthorityError> {
        let current = match store.selection().await? {
            None => None,
            Some(selection) => {
                let rev = store
                    .revision(selection.digest.clone())
                    .await?
                    .ok_or_else(|| StoreError::UnknownRevision(selection.digest.clone()))?;
                let topology = Topology::from_revision(&rev.content).map_err(|e| {
                    AuthorityError::CorruptRevision {
                        revision: selection.digest.clone(),
                        reason: e.to_string(),
                    }
                })?;
                Some(Current {
                    selection,
                    topology: Arc::new(topology),
                })
            }
        };
        let index = current.as_ref().map_or(0, |c| c.selection.index);
        let metrics = Metrics::default();
        metrics.selection_index.set(index);
        let releases = crate::releases::Releases::load(&store).await?;
        let sessions = match settings.sessions.clone() {
            None => None,
            Some(setup) => {
                Some(crate::sessions::Sessions::new(setup).map_err(AuthorityError::Sessions)?)
            }
        };
        Ok(Arc::new(AppState {
            store,
            releases,
            sessions,
            settings,
            current: RwLock::new(current),
            index: watch::Sender::new(index),
            principals: Mutex::new(HashMap::new()),
            last_reports: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            replies: watch::Sender::new(0),
            metrics,
        }))
    }

    fn host_calls(&self, host: &str) -> watch::Receiver<u64> {
        self.calls
            .lock()
            .expect("not poisoned")
            .entry(host.to_string())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// The report deadline, in ms.
    pub(crate) fn settings_report_deadline_ms(&self) -> i64 {
        self.settings.report_deadline.as_millis() as i64
    }

    /// The selected revision's topology, if any.
    pub(crate) fn current_topology(&self) -> Option<Arc<Topology>> {
        self.current().map(|c| c.topology)
    }

    fn current(&self) -> Option<Current> {
        self.current.read().expect("not poisoned").clone()
    }

    pub(crate) async fn caller(&self, headers: &HeaderMap) -> Result<Principal, Failure> {
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(auth::bearer)
            .ok_or_else(|| {
                Failure::new(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "no bearer credential (Authorization: Bearer …)",
                )
            })?;
        let hash = auth::hash_secret(token);
        if let Some(p) = self.principals.lock().expect("not poisoned").get(&hash) {
            return Ok(p.clone());
        }
        let p = self.store.principal(hash.clone()).await?.ok_or_else(|| {
            Failure::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unknown credential",
            )
        })?;
        self.principals
            .lock()
            .expect("not poisoned")
            .insert(hash, p.clone());
        Ok(p)
    }

    pub(crate) async fn operator(&self, headers: &HeaderMap) -> Result<String, Failure> {
        match self.caller(headers).await? {
            Principal::Operator { name } => Ok(name),
            Principal::Agent { host } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the agent of `{host}` may not do this: operators only"),
            )),
            Principal::Session { id } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the runtime of session {id} may not do this: operators only"),
            )),
            Principal::Alerts { name } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the alert sender `{name}` may not do this: operators only"),
            )),
        }
    }

    /// The caller, when it may act for `host`: that host's agent, or (when
    /// `operator_too`) an operator. Otherwise 403, saying the agent may only `what`.
    pub(crate) async fn for_host(
        &self,
        headers: &HeaderMap,
        host: &str,
        operator_too: bool,
        what: &str,
    ) -> Result<Principal, Failure> {
        match self.caller(headers).await? {
            Principal::Agent { host: own } if own == host => Ok(Principal::Agent { host: own }),
            Principal::Agent { host: own } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("the agent of `{own}` may {what}"),
            )),
            p @ Principal::Operator { .. } if operator_too => Ok(p),
            Principal::Operator { .. } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("only the host's agent may do this (an agent may {what})"),
            )),
            Principal::Session { .. } | Principal::Alerts { .. } => Err(Failure::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "only the host's agent or an operator may do this",
            )),
        }
    }

    /// Replaces the in-memory selection after a committed change and wakes polls.
    fn install(&self, selection: Selection, topology: Arc<Topology>) {
        let index = selection.index;
        *self.current.write().expect("not poisoned") = Some(Current {
            selection,
            topology,
        });
        self.metrics.selection_index.set(index);
        self.index.send_replace(index);
    }
}

/// The service's routes over `state`.
pub fn router<S: AuthorityStore>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/ca.pem", get(ca_pem::<S>))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/join", post(join::<S>))
        .route("/v1/tokens", post(create_token::<S>))
        .route("/v1/hosts/{host}/snapshot", get(snapshot::<S>))
        .route("/v1/hosts/{host}/report", post(report::<S>))
        .route(
            "/v1/revisions",
            get(history::<S>)
                .post(publish::<S>)
                // A fleet's revision outgrows axum's 2 MiB default (10,000 hosts).
                .layer(axum::extract::DefaultBodyLimit::max(PUBLISH_LIMIT)),
        )
        .route("/v1/revisions/{rev}", get(revision::<S>))
        .route("/v1/revisions/{a}/diff/{b}", get(diff::<S>))
        .route("/v1/selection", put(select::<S>))
        .route("/v1/status", get(status::<S>))
        .route(
            "/v1/hosts/{host}/calls",
            get(pending_calls::<S>).post(enqueue_call::<S>),
        )
        .route("/v1/calls/{id}", get(call_status::<S>))
        .route("/v1/calls/{id}/reply", post(reply_call::<S>))
        .route(
            "/v1/blobs/{sha256}",
            get(releases::get_blob::<S>)
                .put(releases::put_blob::<S>)
                .layer(axum::extract::DefaultBodyLimit::max(releases::BLOB_LIMIT)),
        )
        .route(
            "/v1/releases",
            get(releases::list_releases::<S>).post(releases::publish_release::<S>),
        )
        .route(
            "/v1/rollouts",
            get(releases::list_rollouts::<S>).post(releases::create_rollout::<S>),
        )
        .route("/v1/rollouts/{id}", get(releases::get_rollout::<S>))
        .route(
            "/v1/rollouts/{id}/{action}",
            post(releases::rollout_action::<S>),
        )
        .route(
            "/v1/hosts/{host}/release",
            get(releases::assignment::<S>).post(releases::report_update::<S>),
        )
        .route(
            "/v1/hosts/{host}/unskip",
            post(releases::request_unskip::<S>),
        )
        .route("/v1/unskips/{id}", get(releases::get_unskip::<S>))
        .route(
            "/v1/sessions",
            get(sessions::list_sessions::<S>).post(sessions::create_session::<S>),
        )
        .route(
            "/v1/sessions/{id}",
            get(sessions::get_session::<S>).delete(crate::session_cleanup::delete_session::<S>),
        )
        .route(
            "/v1/sessions/{id}/events",
            get(sessions::session_events::<S>),
        )
        .route(
            "/v1/sessions/{id}/messages",
            post(sessions::send_message::<S>),
        )
        .route("/v1/sessions/{id}/mode", post(sessions::switch_mode::<S>))
        .route(
            "/v1/sessions/{id}/runtime",
            axum::routing::delete(sessions::stop_runtime::<S>),
        )
        .route("/v1/questions", get(sessions::list_questions::<S>))
        .route(
            "/v1/questions/{id}/answer",
            post(sessions::answer_question::<S>),
        )
        .route(
            "/v1/gate/hook",
            // The handler reads at most `GATE_BODY_LIMIT` itself and answers a
            // deny beyond it (an HTTP 413 is "go ahead" to Claude Code).
            post(sessions::gate_hook::<S>).layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/credentials/alerts",
            post(sessions::create_alerts_credential::<S>),
        )
        .route("/v1/exec", post(sessions::exec::<S>))
        .route("/v1/push", post(sessions::push::<S>))
        .route("/v1/outputs/{id}", get(sessions::get_output::<S>))
        .route("/v1/alerts/alertmanager", post(sessions::alertmanager::<S>))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            credential_first::<S>,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            measure::<S>,
        ))
        .with_state(state)
}

/// Routes anyone may call; every other one needs a bearer credential.
const OPEN: &[&str] = &[
    "/healthz",
    "/readyz",
    "/v1/ca.pem",
    "/v1/openapi.json",
    "/v1/join",
    // Fails closed on its own: answers a deny, never an error status, which Claude
    // Code would take as "go ahead".
    "/v1/gate/hook",
];

/// Refuses a request without a known bearer credential (401) before its body is
/// read or validated, so that nobody learns anything of a route's shape (a 422
/// naming a missing field) without one: a missing, malformed or unknown credential
/// gets the same 401 on every route. What the credential may do is each route's
/// own check.
async fn credential_first<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    req: Request,
    next: Next,
) -> Response {
    if OPEN.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    match state.caller(req.headers()).await {
        Ok(_) => next.run(req).await,
        Err(f) => f.into_response(),
    }
}

/// The header that names a request in the log (`http` spans) and in the answer.
pub const REQUEST_ID: &str = "x-request-id";

/// The caller's `X-Request-Id` (at most 64 visible ASCII characters), else a number
/// of this process's own (`r<n>`).
fn request_id(req: &Request) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    req.headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 64 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "r{}",
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            )
        })
}

async fn measure<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    req: Request,
    next: Next,
) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".into());
    let request_id = request_id(&req);
    let span = tracing::info_span!(
        "http",
        method = %req.method(),
        route = route.as_str(),
        request_id = request_id.as_str(),
    );
    let started = Instant::now();
    let mut resp = tracing::Instrument::instrument(next.run(req), span.clone()).await;
    span.in_scope(|| {
        tracing::debug!(
            status = resp.status().as_u16(),
            ms = started.elapsed().as_millis() as u64,
            "answered"
        )
    });
    if let Ok(v) = axum::http::HeaderValue::from_str(&request_id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    state
        .metrics
        .latency
        .get_or_create(&Route {
            route: route.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .requests
        .get_or_create(&RouteLabels {
            route,
            status: resp.status().as_u16(),
        })
        .inc();
    resp
}

/// `GET /healthz`: the process answers.
#[utoipa::path(get, path = "/healthz", responses((status = 200, description = "alive", body = String)))]
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz`: the store answers.
#[utoipa::path(get, path = "/readyz", responses(
    (status = 200, description = "ready", body = String),
    (status = 503, description = "the store does not answer", body = ApiError)))]
pub async fn readyz<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
) -> Result<&'static str, Failure> {
    state.store.ping().await?;
    Ok("ready\n")
}

/// `GET /metrics` (operator): Prometheus text format.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text exposition 0.0.4", body = String)))]
pub async fn metrics<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    state.operator(&headers).await?;
    let deadline = state.settings.report_deadline.as_millis() as i64;
    let now = now_ms();
    let connected = state
        .last_reports
        .lock()
        .expect("not poisoned")
        .values()
        .filter(|(at, _)| now - at <= deadline)
        .count();
    state.metrics.agents_connected.set(connected as i64);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response())
}

/// `GET /v1/ca.pem`: the CA certificate (public; clients check it against their pin).
#[utoipa::path(get, path = "/v1/ca.pem", responses((status = 200, description = "PEM", body = String)))]
pub async fn ca_pem<S: AuthorityStore>(State(state): State<Arc<AppState<S>>>) -> String {
    state.settings.ca_pem.clone()
}

/// `GET /v1/openapi.json`: this API's OpenAPI document.
#[utoipa::path(get, path = "/v1/openapi.json", responses((status = 200, description = "OpenAPI 3.1", body = Object)))]
pub async fn openapi() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

/// `POST /v1/join`: exchange a join token for an agent credential.
#[utoipa::path(post, path = "/v1/join", request_body = api::JoinRequest, responses(
    (status = 200, body = api::JoinResponse),
    (status = 401, description = "unknown, used (`token-used`) or expired (`token-expired`) token", body = ApiError)))]
pub async fn join<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Json(req): Json<api::JoinRequest>,
) -> Answer<api::JoinResponse> {
    let credential = auth::new_secret(auth::AGENT_PREFIX);
    let outcome = state
        .store
        .redeem_join_token(
            auth::hash_secret(&req.token),
            auth::hash_secret(&credential),
            now_ms(),
        )
        .await?;
    match outcome {
        Redeem::Joined { host } => {
            tracing::info!(%host, version = %req.agent_version, platform = %req.platform, "agent joined");
            Ok(Json(api::JoinResponse { host, credential }))
        }
        Redeem::Unknown => Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unknown join token",
        )),
        Redeem::Used => Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "token-used",
            "this join token was used already: create a new one (`flotilla serve token create`)",
        )),
        Redeem::Expired => Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "token-expired",
            "this join token has expired: create a new one (`flotilla serve token create`)",
        )),
    }
}

/// `POST /v1/tokens` (operator): a one-time join token bound to one host.
#[utoipa::path(post, path = "/v1/tokens", request_body = api::TokenRequest, responses(
    (status = 200, body = api::TokenResponse), (status = 403, body = ApiError)))]
pub async fn create_token<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<api::TokenRequest>,
) -> Answer<api::TokenResponse> {
    state.operator(&headers).await?;
    if req.host.is_empty() || req.host.len() > 253 || req.host.contains(['/', ' ']) {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            format!("`{}` is not a host name", req.host),
        ));
    }
    if req.host == "local" {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid",
            "`local` is each machine's own name for itself, not a fleet host: declare the host with `transport = \"agent\"` under its own name",
        ));
    }
    if let Some(cur) = state.current() {
        if let Some(h) = cur.topology.hosts.get(&req.host) {
            if h.transport != flotilla_model::inventory::TransportKind::Agent {
                return Err(Failure::new(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!(
                        "host `{}` has transport `{}` in the selected revision: only `agent` hosts join",
                        req.host,
                        h.transport.as_str()
                    ),
                ));
            }
        }
    }
    let token = auth::new_secret(auth::JOIN_PREFIX);
    let created_ms = now_ms();
    let ttl = req.ttl_secs.unwrap_or(3600).clamp(1, 7 * 24 * 3600);
    let expires_ms = created_ms + (ttl as i64) * 1000;
    state
        .store
        .create_join_token(NewJoinToken {
            token_hash: auth::hash_secret(&token),
            host: req.host.clone(),
            created_ms,
            expires_ms,
        })
        .await?;
    Ok(Json(api::TokenResponse {
        token,
        host: req.host,
        expires_ms,
        ca_hash: state.settings.ca_hash.clone(),
    }))
}

/// Query of a snapshot long poll.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct PollQuery {
    /// The index the caller holds (0: none).
    #[serde(default)]
    pub index: u64,
    /// How long to wait for a newer one: a duration like `30s`, `500ms` (at most 5m).
    #[serde(default)]
    pub wait: Option<String>,
}

/// `GET /v1/hosts/{host}/snapshot`: the host's view of the selected revision, long-polled.
#[utoipa::path(get, path = "/v1/hosts/{host}/snapshot", params(("host" = String, Path, description = "the host"), PollQuery),
    responses((status = 200, body = api::SnapshotResponse), (status = 403, body = ApiError)))]
pub async fn snapshot<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Path(host): Path<String>,
    Query(q): Query<PollQuery>,
    headers: HeaderMap,
) -> Answer<api::SnapshotResponse> {
    state
        .for_host(&headers, &host, true, "read only its own host's snapshot")
        .await?;
    let wait = wait_of(&q.wait)?;
    // Consul adds up to wait/16 of jitter so that polls do not come back in step.
    let mut r = [0u8; 2];
    getrandom::fill(&mut r).ok();
    let jitter = (wait / 16).mul_f64(u16::from_le_bytes(r) as f64 / 65536.0);
    park(&state.index, q.index, wait + jitter, &state.metrics).await;
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
        .store
        .put_report(HostReportRecord {
            host: host.clone(),
            revision: report.revision.clone(),
            report: text,
            received_ms,
        })
        .await?;
    let previous = state
        .last_reports
        .lock()
        .expect("not poisoned")
        .insert(host.clone(), (received_ms, report.revision.clone()));
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
    Ok(Json(api::HistoryResponse {
        revisions,
        selections,
    }))
}

fn outcome_answer(digest: String, outcome: SelectOutcome) -> Answer<api::SelectResponse> {
    match outcome {
        SelectOutcome::Selected(s) => Ok(Json(api::SelectResponse {
            revision: digest,
            changed: true,
            selection: selection_dto(&s),
        })),
        SelectOutcome::Unchanged(s) => Ok(Json(api::SelectResponse {
            revision: digest,
            changed: false,
            selection: selection_dto(&s),
        })),
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
    }
    outcome_answer(digest, outcome)
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
    let (ra, ta) = load(&state, &a).await?;
    let (rb, tb) = load(&state, &b).await?;
    let changes = crate::diff::changes(&ta, &tb);
    Ok(Json(api::DiffResponse {
        from: ra.digest,
        to: rb.digest,
        changes,
    }))
}

/// `GET /v1/status` (operator): every host's last report and its age.
#[utoipa::path(get, path = "/v1/status", responses((status = 200, body = api::FleetStatus), (status = 403, body = ApiError)))]
pub async fn status<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<api::FleetStatus> {
    state.operator(&headers).await?;
    let now = now_ms();
    let deadline = state.settings.report_deadline.as_millis() as i64;
    let current = state.current();
    let mut hosts: std::collections::BTreeMap<String, api::HostStateDto> = Default::default();
    if let Some(c) = &current {
        // Hosts that run something or have an agent (not the implicit `local` host
        // of an inventory that puts nothing there).
        let used: std::collections::BTreeSet<&str> = c
            .topology
            .components
            .iter()
            .map(|x| x.host.as_str())
            .collect();
        for (name, h) in &c.topology.hosts {
            if !used.contains(name.as_str())
                && h.transport != flotilla_model::inventory::TransportKind::Agent
            {
                continue;
            }
            hosts.insert(
                name.clone(),
                api::HostStateDto {
                    host: name.clone(),
                    observability: "never-reported".into(),
                    last_report_ms: None,
                    age_ms: None,
                    revision: None,
                    report: None,
                    agent_identity: None,
                },
            );
        }
    }
    let stored = state.store.reports().await?;
    let parsed: Vec<(String, i64, api::AgentReport)> = stored
        .iter()
        .filter_map(|r| {
            serde_json::from_str(&r.report)
                .ok()
                .map(|rep| (r.host.clone(), r.received_ms, rep))
        })
        .collect();
    let received: Vec<crate::fleet::Received<'_>> = parsed
        .iter()
        .map(|(host, received_ms, report)| crate::fleet::Received {
            host,
            received_ms: *received_ms,
            report,
        })
        .collect();
    let mut merged = crate::fleet::merged(
        current.as_ref().map(|c| &*c.topology),
        &received,
        now,
        deadline,
    );
    if let Some(c) = &current {
        releases::annotate_component_releases(&state, &c.topology, &mut merged).await;
    }
    for r in stored {
        let age = now - r.received_ms;
        let report: Option<api::AgentReport> = serde_json::from_str(&r.report).ok();
        hosts.insert(
            r.host.clone(),
            api::HostStateDto {
                host: r.host,
                observability: if age <= deadline {
                    "observed"
                } else {
                    "unreachable"
                }
                .into(),
                last_report_ms: Some(r.received_ms),
                age_ms: Some(age),
                revision: r.revision,
                report,
                agent_identity: None,
            },
        );
    }
    for (host, id) in releases::agent_identities(&state).await {
        if let Some(h) = hosts.get_mut(&host) {
            h.agent_identity = Some(id);
        }
    }
    Ok(Json(api::FleetStatus {
        selection: current.as_ref().map(|c| selection_dto(&c.selection)),
        now_ms: now,
        report_deadline_ms: deadline,
        hosts: hosts.into_values().collect(),
        report: merged,
    }))
}

/// A long poll's wait: returns once `index` passes `after`, or after `wait` (at once
/// when it has passed already or `wait` is zero), counted as a waiter meanwhile.
pub(crate) async fn park(
    index: &watch::Sender<u64>,
    after: u64,
    wait: Duration,
    metrics: &Metrics,
) {
    let mut rx = index.subscribe();
    if *rx.borrow() <= after && !wait.is_zero() {
        let _waiting = Waiting::new(&metrics.longpoll_waiters);
        let _ = tokio::time::timeout(wait, rx.wait_for(|i| *i > after)).await;
    }
}

pub(crate) fn wait_of(wait: &Option<String>) -> Result<Duration, Failure> {
    match wait {
        None => Ok(DEFAULT_WAIT),
        Some(w) => humantime::parse_duration(w)
            .map(|d| d.min(MAX_WAIT))
            .map_err(|e| {
                Failure::new(
                    StatusCode::BAD_REQUEST,
                    "invalid",
                    format!("wait `{w}`: {e}"),
                )
            }),
    }
}

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
    let text = serde_json::to_string(&Stored {
        request: req.request,
        deadline_ms: req.deadline_ms,
    })
    .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, "invalid", e.to_string()))?;
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
    Ok(Json(api::Enqueued { id }))
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
        let _waiting = Waiting::new(&state.metrics.longpoll_waiters);
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
    state.replies.send_modify(|n| *n += 1);
    Ok(Json(serde_json::json!({ "id": id })))
}

/// Query of an answer's long poll.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct WaitQuery {
    /// How long to wait for the answer: `30s`, `500ms` (at most 5m).
    #[serde(default)]
    pub wait: Option<String>,
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
            return Ok(Json(api::CallStatus {
                id,
                host: c.host,
                response: c.reply.and_then(|r| serde_json::from_str(&r).ok()),
            }));
        }
        let _ = tokio::time::timeout(left, rx.changed()).await;
    }
}

/// Runs the service on `listener` with `tls` until `shutdown` resolves.
///
/// # Errors
/// IO errors of the listener.
pub async fn run<S: AuthorityStore>(
    state: Arc<AppState<S>>,
    listener: std::net::TcpListener,
    tls: rustls::ServerConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let handle = axum_server::Handle::new();
    let h = handle.clone();
    tokio::spawn(async move {
        shutdown.await;
        // Long polls are cut short: agents simply poll again.
        h.graceful_shutdown(Some(Duration::from_secs(2)));
    });
    releases::spawn_ticker(&state);
    crate::sessions::spawn_reconciler(&state);
    crate::session_cleanup::spawn_retention(&state);
    let config = axum_server::tls_rustls::RustlsConfig::from_config(Arc::new(tls));
    listener.set_nonblocking(true)?;
    // TCP_NODELAY on every connection: small answers (a gate decision, a long
    // poll's wake-up) go out at once instead of waiting for the client's delayed
    // ACK (measured: ≈ 40 ms per fresh connection of `flotilla gate hook` without).
    let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(config)
        .acceptor(axum_server::accept::NoDelayAcceptor::new());
    axum_server::from_tcp(listener)?
        .acceptor(acceptor)
        .handle(handle)
        .serve(router(state).into_make_service())
        .await
}
