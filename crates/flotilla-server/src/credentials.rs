//! Credentials and join tokens, for operators: listed (never a secret: an id is the
//! first 12 hex digits of the stored hash), revoked by a unique id prefix (like
//! git's abbreviated commits) or, for agents, by host; and a metrics scraper's
//! credential made (`/metrics` only).
//!
//! A revocation is a row in the shared database: this process forgets the
//! credential at once, every other authority on the same database within
//! [`crate::state::PRINCIPAL_TTL`].

use crate::api::ApiError;
use crate::auth;
use crate::failure::{invalid, not_found, Answer, Failure};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::Json;
use flotilla_api::credentials::{
    CredentialCreated, CredentialDto, CredentialList, CredentialsRevoked, JoinTokenDto,
    JoinTokenList, MetricsCredentialRequest, RevokeCredentials,
};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{
    credential_id, AuthorityStore, ByPrefix, CredentialRecord, JoinTokenRecord, Principal,
};
use std::sync::Arc;

/// The shortest id prefix a revoke accepts (hex digits).
pub const MIN_ID_PREFIX: usize = 4;

fn credential_dto(c: &CredentialRecord) -> CredentialDto {
    let (kind, name, host) = match &c.principal {
        Principal::Operator { name } => ("operator", name.clone(), None),
        Principal::Agent { host } => ("agent", host.clone(), Some(host.clone())),
        Principal::Session { id } => ("session", id.to_string(), None),
        Principal::Alerts { name } => ("alerts", name.clone(), None),
        Principal::Metrics { name } => ("metrics", name.clone(), None),
        Principal::UiLink { id, .. } => ("ui-link", id.to_string(), None),
    };
    CredentialDto {
        id: credential_id(&c.credential_hash).to_string(),
        kind: kind.into(),
        name,
        host,
        created_ms: c.created_ms,
        last_used_ms: c.last_used_ms,
        last_address: c.last_address.clone(),
        revoked_ms: c.revoked_ms,
    }
}

fn token_dto(t: &JoinTokenRecord, now: i64) -> JoinTokenDto {
    let state = if t.revoked_ms.is_some() {
        "revoked"
    } else if t.used_ms.is_some() {
        "used"
    } else if now >= t.expires_ms {
        "expired"
    } else {
        "unused"
    };
    JoinTokenDto {
        id: credential_id(&t.token_hash).to_string(),
        host: t.host.clone(),
        created_ms: t.created_ms,
        expires_ms: t.expires_ms,
        used_ms: t.used_ms,
        revoked_ms: t.revoked_ms,
        keep_credentials: t.keep_credentials,
        state: state.into(),
    }
}

/// An id prefix as given: at least [`MIN_ID_PREFIX`] hex digits, else 400.
fn id_prefix(id: &str) -> Result<String, Failure> {
    let id = id.trim();
    if id.len() < MIN_ID_PREFIX || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(invalid(format!(
            "`{id}` is not an id: give at least {MIN_ID_PREFIX} hex digits of one (the ID column of the listing)"
        )));
    }
    Ok(id.to_ascii_lowercase())
}

/// The one match of a prefix, else 404 (none) or 400 (several, naming them).
fn one<T>(found: ByPrefix<T>, what: &str, id: &str) -> Result<T, Failure> {
    match found {
        ByPrefix::One(t) => Ok(t),
        ByPrefix::Unknown => Err(not_found(format!("no {what} has an id starting `{id}`"))),
        ByPrefix::Ambiguous(hashes) => Err(invalid(format!(
            "`{id}` is ambiguous: it starts the ids of {} ({}): give more digits",
            hashes.len(),
            hashes
                .iter()
                .map(|h| credential_id(h))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// `GET /v1/credentials` (operator): every credential, oldest first.
#[utoipa::path(get, path = "/v1/credentials",
    responses((status = 200, body = CredentialList), (status = 403, body = ApiError)))]
pub async fn list<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<CredentialList> {
    state.operator(&headers).await?;
    let credentials = state.store.credentials().await?;
    Ok(Json(CredentialList {
        credentials: credentials.iter().map(credential_dto).collect(),
    }))
}

/// `POST /v1/credentials/revoke` (operator): one credential by a unique id prefix,
/// or every agent credential of a host.
#[utoipa::path(post, path = "/v1/credentials/revoke", request_body = RevokeCredentials,
    responses((status = 200, body = CredentialsRevoked),
        (status = 400, description = "neither or both of id and host, a malformed or ambiguous id", body = ApiError),
        (status = 403, body = ApiError),
        (status = 404, description = "no such credential, or the host has none left", body = ApiError)))]
pub async fn revoke<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<RevokeCredentials>,
) -> Answer<CredentialsRevoked> {
    let by = state.operator(&headers).await?;
    let now = now_ms();
    let revoked = match (&req.id, &req.host) {
        (Some(id), None) => {
            let id = id_prefix(id)?;
            let found = state.store.revoke_credential(id.clone(), now).await?;
            vec![one(found, "credential", &id)?]
        }
        (None, Some(host)) => {
            let gone = state
                .store
                .revoke_host_credentials(host.clone(), now)
                .await?;
            if gone.is_empty() {
                return Err(not_found(format!(
                    "host `{host}` has no agent credential that is not revoked already"
                )));
            }
            gone
        }
        _ => return Err(invalid("give exactly one of `id` and `host`")),
    };
    state.forget_credentials(revoked.iter().map(|c| c.credential_hash.as_str()));
    crate::cluster::announce(&state, crate::cluster::Wake::Revoked).await;
    for c in &revoked {
        tracing::info!(id = credential_id(&c.credential_hash), principal = ?c.principal, %by, "credential revoked");
    }
    Ok(Json(CredentialsRevoked {
        credentials: revoked.iter().map(credential_dto).collect(),
    }))
}

/// `POST /v1/credentials/metrics` (operator): a credential that may only read
/// `/metrics` (shown once, stored hashed).
#[utoipa::path(post, path = "/v1/credentials/metrics", request_body = MetricsCredentialRequest,
    responses((status = 200, body = CredentialCreated), (status = 400, body = ApiError), (status = 403, body = ApiError)))]
pub async fn create_metrics<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<MetricsCredentialRequest>,
) -> Answer<CredentialCreated> {
    state.operator(&headers).await?;
    let name = req.name.trim().to_string();
    if name.is_empty() || name.len() > 128 || name.chars().any(char::is_control) {
        return Err(invalid(format!("`{}` is not a scraper's name", req.name)));
    }
    let credential = auth::new_secret(auth::METRICS_PREFIX);
    let hash = auth::hash_secret(&credential);
    state
        .store
        .create_credential(
            hash.clone(),
            Principal::Metrics { name: name.clone() },
            now_ms(),
        )
        .await?;
    Ok(Json(CredentialCreated {
        id: credential_id(&hash).to_string(),
        kind: "metrics".into(),
        name,
        credential,
    }))
}

/// `GET /v1/tokens` (operator): every join token, newest first.
#[utoipa::path(get, path = "/v1/tokens",
    responses((status = 200, body = JoinTokenList), (status = 403, body = ApiError)))]
pub async fn list_tokens<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<JoinTokenList> {
    state.operator(&headers).await?;
    let now = now_ms();
    let tokens = state.store.join_tokens().await?;
    Ok(Json(JoinTokenList {
        tokens: tokens.iter().map(|t| token_dto(t, now)).collect(),
    }))
}

/// `DELETE /v1/tokens/{id}` (operator): revokes the join token with this unique
/// id prefix; it can no longer be redeemed.
#[utoipa::path(delete, path = "/v1/tokens/{id}", params(("id" = String, Path, description = "A unique prefix (at least 4 hex digits) of the token's id")),
    responses((status = 200, body = JoinTokenDto),
        (status = 400, description = "a malformed or ambiguous id", body = ApiError),
        (status = 403, body = ApiError), (status = 404, body = ApiError)))]
pub async fn revoke_token<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Answer<JoinTokenDto> {
    state.operator(&headers).await?;
    let id = id_prefix(&id)?;
    let now = now_ms();
    let found = state.store.revoke_join_token(id.clone(), now).await?;
    let t = one(found, "join token", &id)?;
    Ok(Json(token_dto(&t, now)))
}
