//! Joining: a join token exchanged for an agent credential, and operators minting
//! join tokens.

use crate::api::{self, ApiError};
use crate::auth;
use crate::failure::{Answer, Failure};
use crate::state::AppState;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, NewJoinToken, Redeem};
use std::sync::Arc;

/// `POST /v1/join`: exchange a join token for an agent credential.
#[utoipa::path(post, path = "/v1/join", request_body = api::JoinRequest, responses(
    (status = 200, body = api::JoinResponse),
    (status = 401, description = "unknown, revoked (`token-revoked`), used (`token-used`) or expired (`token-expired`) token", body = ApiError)))]
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
        Redeem::Joined { host, revoked } => {
            if revoked > 0 {
                // The host's older credentials, revoked by joining: refused here at
                // once, by the others once they hear of it (at once, or at their
                // next re-check of the watermarks).
                state.forget_agents_of(&host);
                crate::cluster::announce(&state, crate::cluster::Wake::Revoked).await;
            }
            tracing::info!(%host, version = %req.agent_version, platform = %req.platform, revoked_older_credentials = revoked, "agent joined");
            Ok(Json(api::JoinResponse { host, credential }))
        }
        Redeem::Unknown => Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "unknown join token",
        )),
        Redeem::Revoked => Err(Failure::new(
            StatusCode::UNAUTHORIZED,
            "token-revoked",
            "this join token was revoked: create a new one (`flotilla serve token create`)",
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
            keep_credentials: req.keep_credentials,
        })
        .await?;
    Ok(Json(api::TokenResponse {
        token,
        host: req.host,
        expires_ms,
        ca_hash: state.settings.ca_hash.clone(),
    }))
}
