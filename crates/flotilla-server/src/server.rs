//! The authority's HTTP service: routes, authorisation, long-polled snapshots.
//!
//! Who may do what (every `/v1` route but `ca.pem`, `join` and `openapi.json` needs a
//! bearer credential; the dashboard under `/ui` signs in with a cookie, `crate::ui`):
//!
//! | route | operator | agent of host H |
//! | --- | --- | --- |
//! | `GET /v1/hosts/{host}/snapshot` | any host | H only |
//! | `POST /v1/hosts/{host}/report` | — | H only |
//! | `GET`/`POST /v1/hosts/{host}/release` | read any host's | H only |
//! | `GET /v1/blobs/{sha256}` | yes | yes (artifacts are not secret; their signatures are what agents trust) |
//! | revisions, selection, tokens, credentials, status, releases, blob uploads, rollouts, `/metrics` | yes | — (403) |
//!
//! A metrics scraper's credential (`flotilla serve credentials create --kind
//! metrics`) reads `/metrics` and nothing else (403). A revoked credential is
//! refused (401, `credential-revoked`) by every authority sharing the database
//! within [`crate::state::PRINCIPAL_TTL`].
//!
//! The selection (which revision is desired) is kept in memory beside the store, so a
//! long poll never touches the database; it is loaded at start and replaced after
//! each committed publish or select, then the waiting polls are woken.

use crate::calls::{call_status, enqueue_call, pending_calls, reply_call};
use crate::credentials;
use crate::joining::{create_token, join};
use crate::metrics::{Route, RouteLabels};

use crate::releases;
use crate::revisions::{diff, history, publish, report, revision, select, snapshot, PUBLISH_LIMIT};
use crate::service::{ca_pem, healthz, metrics, readyz};
use crate::sessions;
use crate::status::status;
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::Router;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::state::{AppState, Settings};

/// The service's routes over `state`.
pub fn router<S: AuthorityStore>(state: Arc<AppState<S>>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz::<S>))
        .route("/metrics", get(metrics::<S>))
        .route("/v1/ca.pem", get(ca_pem::<S>))
        .route("/v1/openapi.json", get(crate::openapi::openapi))
        .route("/v1/join", post(join::<S>))
        .route(
            "/v1/tokens",
            post(create_token::<S>).get(credentials::list_tokens::<S>),
        )
        .route("/v1/tokens/{id}", delete(credentials::revoke_token::<S>))
        .route("/v1/credentials", get(credentials::list::<S>))
        .route("/v1/credentials/revoke", post(credentials::revoke::<S>))
        .route(
            "/v1/credentials/metrics",
            post(credentials::create_metrics::<S>),
        )
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
            get(crate::blobs::routes::get_blob::<S>)
                .put(crate::blobs::routes::put_blob::<S>)
                // Streamed to a file: the limit is the handler's own.
                .layer(axum::extract::DefaultBodyLimit::disable()),
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
        .route("/v1/rollbacks", post(releases::create_rollback::<S>))
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
            get(sessions::get_session::<S>).delete(crate::sessions::cleanup::delete_session::<S>),
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
        .route("/v1/session/tree", get(sessions::session_tree::<S>))
        .route("/v1/outputs/{id}", get(sessions::get_output::<S>))
        .route("/v1/alerts/alertmanager", post(sessions::alertmanager::<S>))
        .route(
            "/v1/notifications",
            get(crate::notify::routes::list_notifications::<S>),
        )
        // The web dashboard (`/ui`, its own cookie sign-in) and `/v1/ui-links`.
        .merge(crate::ui::router(state.clone()))
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
    let path = req.uri().path();
    // The dashboard signs in with its own cookie (`crate::ui`).
    if OPEN.contains(&path) || path == "/ui" || path.starts_with("/ui/") {
        return next.run(req).await;
    }
    let peer = req
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0);
    match state.authenticate(req.headers(), peer).await {
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
    crate::cluster::spawn(&state);
    releases::spawn_ticker(&state);
    crate::sessions::spawn_reconciler(&state);
    crate::sessions::cleanup::spawn_retention(&state);
    crate::notify::worker::spawn(&state);
    crate::ui::watch::spawn(&state);
    crate::blobs::gc::spawn(&state);
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
        // The peer's address: the dashboard limits sign-in attempts per client.
        .serve(router(state).into_make_service_with_connect_info::<std::net::SocketAddr>())
        .await
}
