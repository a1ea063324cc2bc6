//! The extractors pages take: [`Signed`] (any signed-in browser) and [`Acting`]
//! (the operator role, on a state-changing request whose CSRF token the guard
//! checked).

use super::layout;
use super::session::Session;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// A signed-in browser's session. Taking it makes a route sign-in only: without a
/// live session a page request is redirected to `/ui/login?next=<this page>`; an
/// htmx request, an event stream or any other method gets 401 (htmx is told to go
/// to the sign-in page with `HX-Redirect`).
#[derive(Clone)]
pub struct Signed(pub Arc<Session>);

/// A signed-in operator's state-changing request: [`Signed`] with the operator role
/// and a CSRF token the guard checked (`X-CSRF-Token`, or the `csrf` field of a
/// urlencoded form). A viewer gets 403; so does a request the guard did not check
/// (a `GET`).
#[derive(Clone)]
pub struct Acting(pub Arc<Session>);

/// Set by the guard on a state-changing request whose CSRF token matched.
#[derive(Clone, Copy)]
pub(crate) struct CsrfChecked;

/// The live session a request's cookie names, if its credential is still known to
/// the store (a revoked sign-in link ends its sessions here too, even when revoked
/// through another authority process sharing the database).
pub(crate) async fn session_of<S: AuthorityStore>(
    state: &AppState<S>,
    headers: &HeaderMap,
) -> Option<Arc<Session>> {
    let id = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(super::session::from_cookie_header)?;
    let s = state.ui.sessions.get(id)?;
    still_valid(state, &s).await.then_some(s)
}

/// Whether session `s` may go on: not ended, and its credential still known.
pub(crate) async fn still_valid<S: AuthorityStore>(state: &AppState<S>, s: &Session) -> bool {
    if state.ui.sessions.get(&s.id).is_none() {
        return false;
    }
    match state.store.principal(s.credential_hash.clone()).await {
        Ok(Some(_)) => true,
        Ok(None) => {
            state.ui.sessions.end(&s.id);
            false
        }
        // The store is down: the page itself will say so; keep the session.
        Err(_) => true,
    }
}

/// Whether a request wants a page (a browser navigation), not a fragment or data.
fn wants_page(parts: &Parts) -> bool {
    let h = &parts.headers;
    parts.method == Method::GET
        && !h.contains_key("hx-request")
        && !h
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/event-stream"))
}

/// Where the sign-in page sends the browser back to: this request's path and query.
fn login_with_next(path_and_query: &str) -> String {
    let next: String = url::form_urlencoded::byte_serialize(path_and_query.as_bytes()).collect();
    format!("{}?next={next}", flotilla_api::links::Link::Login.path())
}

/// The answer to a request without a live session.
pub(crate) fn not_signed_in(parts: &Parts) -> Response {
    let here = parts
        .uri
        .path_and_query()
        .map_or("/ui/", |p| p.as_str())
        .to_string();
    if wants_page(parts) {
        return Redirect::to(&login_with_next(&here)).into_response();
    }
    // htmx: go to the sign-in page, back to the page the request came from.
    let from = parts
        .headers
        .get("hx-current-url")
        .and_then(|v| v.to_str().ok())
        .and_then(|u| u.find("/ui").map(|i| u[i..].to_string()))
        .unwrap_or_else(|| "/ui/".into());
    let mut r = layout::message(
        StatusCode::UNAUTHORIZED,
        "Not signed in",
        "Sign in to the dashboard first.",
    );
    if let Ok(v) = HeaderValue::from_str(&login_with_next(&from)) {
        r.headers_mut().insert("hx-redirect", v);
    }
    r
}

impl<S: AuthorityStore> FromRequestParts<Arc<AppState<S>>> for Signed {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState<S>>,
    ) -> Result<Self, Self::Rejection> {
        match session_of(state, &parts.headers).await {
            Some(s) => Ok(Signed(s)),
            None => Err(not_signed_in(parts)),
        }
    }
}

impl<S: AuthorityStore> FromRequestParts<Arc<AppState<S>>> for Acting {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState<S>>,
    ) -> Result<Self, Self::Rejection> {
        let Signed(s) = Signed::from_request_parts(parts, state).await?;
        if !s.may_act() {
            return Err(layout::viewer_refused());
        }
        if parts.extensions.get::<CsrfChecked>().is_none() {
            return Err(layout::message(
                StatusCode::FORBIDDEN,
                "Refused",
                "An action is a POST carrying the session's CSRF token.",
            ));
        }
        Ok(Acting(s))
    }
}
