//! `GET /v1/session/tree`: a session's runtime fetches the git bundle of its
//! session's base from the clone cache (a pod's init container makes its tree from
//! it, [`flotilla_sessions::clone_cache::tree_from_bundle`]): where the runtime
//! cannot borrow the mirror's objects because it does not run on this host.

use super::gate::session_caller;
use super::records::{load_session, sessions_of};
use crate::failure::Failure;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The bundle (`application/x-git-bundle`), made now from the session's pin in the
/// mirror (one ref, `refs/flotilla/sessions/<id>`). Only the session's running
/// runtime may ask (its credential). The bundle is built in the session's directory
/// and sent whole.
///
/// # Errors
/// 403 for any other caller; 409 when sessions are off; 500 when the bundle
/// cannot be made (the mirror or the pin is gone).
pub async fn session_tree<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    let id = session_caller(&state, &headers).await?;
    let sessions = sessions_of(&state)?;
    let (doc, _) = load_session(&state, id).await?;
    let clones = sessions.clones.clone();
    let out = sessions
        .session_dir(id)
        .join(format!(".tree-{}.bundle", crate::auth::new_secret("")));
    let bytes = tokio::task::spawn_blocking(move || {
        let made = clones
            .session_bundle(&doc.repo, &id.to_string(), &out)
            .map_err(|e| e.to_string())
            .and_then(|()| std::fs::read(&out).map_err(|e| e.to_string()));
        let _ = std::fs::remove_file(&out);
        made
    })
    .await
    .map_err(|e| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "tree", e.to_string()))?
    .map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "tree",
            format!("session {id}: making the bundle of its tree: {e}"),
        )
    })?;
    let mut r = Response::new(Body::from(bytes));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-git-bundle"),
    );
    Ok(r)
}
