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
