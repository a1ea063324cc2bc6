//! Dashboard sign-in links on `/v1` (operator credential): `POST /v1/ui-links`
//! makes one (its credential `flt-ui-…` shown once inside its URL, stored hashed),
//! `GET /v1/ui-links` lists them, `DELETE /v1/ui-links/{id}` revokes one and ends
//! the dashboard sessions it opened.

use crate::api::ApiError;
use crate::auth::{hash_secret, new_secret, UI_LINK_PREFIX};
use crate::failure::{invalid, not_found, Answer};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{delete, get};
use axum::{Json, Router};
use flotilla_api::links::Link;
use flotilla_api::ui_links::{UiLinkCreated, UiLinkDto, UiLinkList, UiLinkRequest, UiLinkRevoked};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, NewUiLink, Principal, UiRole};
use std::sync::Arc;

/// A link's lifetime unless asked otherwise (15 minutes).
pub const DEFAULT_TTL_SECS: u64 = 15 * 60;
/// The longest lifetime a link may be given (7 days).
pub const MAX_TTL_SECS: u64 = 7 * 24 * 3600;

/// The routes.
pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/v1/ui-links", get(list::<S>).post(create::<S>))
        .route("/v1/ui-links/{id}", delete(revoke::<S>))
}

/// `POST /v1/ui-links` (operator): a new one-time sign-in link.
#[utoipa::path(post, path = "/v1/ui-links", request_body = UiLinkRequest,
    responses((status = 200, body = UiLinkCreated), (status = 400, body = ApiError), (status = 403, body = ApiError)))]
pub async fn create<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Json(req): Json<UiLinkRequest>,
) -> Answer<UiLinkCreated> {
    let by = state.operator(&headers).await?;
    let role = UiRole::parse(&req.role).ok_or_else(|| {
        invalid(format!(
            "role `{}`: expected `operator` or `viewer`",
            req.role
        ))
    })?;
    let ttl = req.ttl_secs.unwrap_or(DEFAULT_TTL_SECS);
    if ttl == 0 || ttl > MAX_TTL_SECS {
        return Err(invalid(format!(
            "ttl {ttl} s: expected 1 s to {MAX_TTL_SECS} s (7 days)"
        )));
    }
    let credential = new_secret(UI_LINK_PREFIX);
    let now = now_ms();
    let expires_ms = now + (ttl as i64) * 1000;
    let id = state
        .store
        .create_ui_link(NewUiLink {
            credential_hash: hash_secret(&credential),
            role,
            created_by: by,
            created_ms: now,
            expires_ms,
        })
        .await?;
    Ok(Json(UiLinkCreated {
        id,
        role: role.as_str().into(),
        url: format!(
            "{}?token={credential}",
            Link::Login.url(&state.settings.public_url)
        ),
        expires_ms,
    }))
}

/// `GET /v1/ui-links` (operator): every sign-in link, newest first.
#[utoipa::path(get, path = "/v1/ui-links", responses((status = 200, body = UiLinkList), (status = 403, body = ApiError)))]
pub async fn list<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Answer<UiLinkList> {
    state.operator(&headers).await?;
    let now = now_ms();
    let links = state
        .store
        .ui_links()
        .await?
        .into_iter()
        .map(|l| UiLinkDto {
            state: match (l.revoked_ms, l.used_ms) {
                (Some(_), _) => "revoked",
                (None, Some(_)) => "used",
                (None, None) if now >= l.expires_ms => "expired",
                (None, None) => "unused",
            }
            .into(),
            id: l.id,
            role: l.role.as_str().into(),
            created_by: l.created_by,
            created_ms: l.created_ms,
            expires_ms: l.expires_ms,
            used_ms: l.used_ms,
            revoked_ms: l.revoked_ms,
        })
        .collect();
    Ok(Json(UiLinkList { links }))
}

/// `DELETE /v1/ui-links/{id}` (operator): revokes the link and ends its sessions.
#[utoipa::path(delete, path = "/v1/ui-links/{id}", params(("id" = u64, Path, description = "The link's id")),
    responses((status = 200, body = UiLinkRevoked), (status = 403, body = ApiError), (status = 404, body = ApiError)))]
pub async fn revoke<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Path(id): Path<u64>,
) -> Answer<UiLinkRevoked> {
    state.operator(&headers).await?;
    if !state.store.revoke_ui_link(id, now_ms()).await? {
        return Err(not_found(format!(
            "no sign-in link {id} that is not already revoked"
        )));
    }
    let sessions_ended = state.ui.sessions.end_link(id);
    state
        .principals
        .lock()
        .expect("not poisoned")
        .retain(|_, (p, _)| !matches!(p, Principal::UiLink { id: i, .. } if *i == id));
    Ok(Json(UiLinkRevoked { id, sessions_ended }))
}
