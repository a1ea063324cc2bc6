//! `GET /v1/notifications` (operator): the notifications recorded, newest first,
//! with each webhook's delivery.

use crate::api::ApiError;
use crate::failure::{invalid, Answer};
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::Json;
use flotilla_api::notifications::{NotificationDto, NotificationList};
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The most notifications one answer holds.
pub const MAX_LIMIT: u32 = 1000;

/// `?limit=N` (default 100, at most [`MAX_LIMIT`]).
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
pub struct ListQuery {
    /// How many, newest first (default 100, at most 1000).
    pub limit: Option<u32>,
}

/// `GET /v1/notifications` (operator): the newest notifications and their
/// deliveries.
#[utoipa::path(get, path = "/v1/notifications", params(ListQuery),
    responses((status = 200, body = NotificationList), (status = 403, body = ApiError)))]
pub async fn list_notifications<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Answer<NotificationList> {
    state.operator(&headers).await?;
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIMIT {
        return Err(invalid(format!("limit must be 1 to {MAX_LIMIT}")));
    }
    let notifications = state
        .store
        .notifications(limit)
        .await?
        .into_iter()
        .filter_map(|r| serde_json::from_str::<NotificationDto>(&r.doc).ok())
        .collect();
    Ok(Json(NotificationList { notifications }))
}
