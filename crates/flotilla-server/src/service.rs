//! The service's own endpoints: liveness, readiness, metrics and the CA certificate.

use crate::api::ApiError;
use crate::failure::Failure;
use crate::state::AppState;
use axum::extract::State;
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

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

/// `GET /metrics` (operator or metrics scraper): Prometheus text format.
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text exposition 0.0.4", body = String)))]
pub async fn metrics<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    state.metrics_reader(&headers).await?;
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
