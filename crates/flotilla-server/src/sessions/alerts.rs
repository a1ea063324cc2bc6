//! Alertmanager's webhook (`POST /v1/alerts/alertmanager`), which opens or wakes
//! sessions, and the alert sender's credential.

use super::lifecycle::{create, deliver};
use super::records::{event, sessions_of};
use crate::failure::invalid;
use flotilla_api::sessions::{
    AlertsCredentialRequest, AlertsCredentialResponse, AlertsResponse, CreateSessionRequest,
    SessionDoc,
};

use crate::api::ApiError;
use crate::failure::{Answer, Failure};
use crate::sessions_config::*;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Principal};
use std::sync::Arc;

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
            state.ui.hub.changed(crate::ui::hub::Topic::Alerts);
            if created {
                event(
                    &state,
                    id,
                    serde_json::json!({"kind": "alert", "status": "firing", "fingerprint": alert.fingerprint, "labels": alert.labels, "annotations": alert.annotations, "starts_at": alert.starts_at}),
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
                            serde_json::json!({"kind": "alert", "status": "resolved", "fingerprint": alert.fingerprint, "message": alert.resolved_message(), "ends_at": alert.ends_at}),
                        )
                        .await?;
                        out.updated.push(r.id);
                    }
                }
                None => out.unchanged += 1,
            }
        }
    }
    if !out.opened.is_empty() || !out.updated.is_empty() {
        state.ui.hub.changed(crate::ui::hub::Topic::Alerts);
    }
    Ok(Json(out))
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

/// An alert as received, from the events of the session it opened.
#[derive(Debug, Clone)]
pub struct ReceivedAlert {
    /// The session it opened.
    pub session: u64,
    /// `firing`, or `resolved` once Alertmanager said so.
    pub status: String,
    /// Its labels (`alertname`, `severity`, …), as sent.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Its annotations, as sent.
    pub annotations: std::collections::BTreeMap<String, String>,
    /// `startsAt`, RFC 3339, as sent.
    pub starts_at: String,
    /// When it was received, ms since the Unix epoch.
    pub received_ms: i64,
    /// When its resolution was received, ms since the Unix epoch.
    pub resolved_ms: Option<i64>,
}

/// Every alert that opened a session, newest first (the dashboard's alerts page).
pub(crate) async fn received<S: AuthorityStore>(
    state: &AppState<S>,
) -> Result<Vec<ReceivedAlert>, Failure> {
    let mut out = Vec::new();
    for rec in state.store.sessions().await? {
        let opened_by_alert =
            serde_json::from_str::<SessionDoc>(&rec.doc).is_ok_and(|d| d.alert.is_some());
        if !opened_by_alert {
            continue;
        }
        let mut alert: Option<ReceivedAlert> = None;
        for e in state.store.session_events(rec.id, 0).await? {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&e.doc) else {
                continue;
            };
            if v["kind"] != "alert" {
                continue;
            }
            let map = |k: &str| {
                serde_json::from_value::<std::collections::BTreeMap<String, String>>(v[k].clone())
                    .unwrap_or_default()
            };
            match (v["status"].as_str(), alert.as_mut()) {
                (Some("firing"), None) => {
                    alert = Some(ReceivedAlert {
                        session: rec.id,
                        status: "firing".into(),
                        labels: map("labels"),
                        annotations: map("annotations"),
                        starts_at: v["starts_at"].as_str().unwrap_or_default().to_string(),
                        received_ms: e.at_ms,
                        resolved_ms: None,
                    })
                }
                (Some("resolved"), Some(a)) => {
                    a.status = "resolved".into();
                    a.resolved_ms = Some(e.at_ms);
                }
                _ => {}
            }
        }
        out.extend(alert);
    }
    out.sort_by_key(|a| std::cmp::Reverse((a.received_ms, a.session)));
    Ok(out)
}
