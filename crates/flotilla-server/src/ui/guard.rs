//! The dashboard's guard, a middleware over every `/ui` route: a state-changing
//! request (any method but `GET`/`HEAD`/`OPTIONS`) other than signing in must come
//! from a live session and carry its CSRF token — the `X-CSRF-Token` header (htmx
//! sends it from `<body hx-headers>`) or a `csrf` field of a urlencoded form — or
//! it gets 403; a viewer's gets 403 too (except signing out). Every answer gets the
//! dashboard's security headers (a strict Content-Security-Policy: no inline
//! script, no third party; no referrer; no framing).

use super::extract::{not_signed_in, session_of, CsrfChecked};
use super::layout;
use super::session::same_token;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The largest urlencoded form the guard reads to find its `csrf` field (2 MiB).
pub const FORM_LIMIT: usize = 2 * 1024 * 1024;

/// The header htmx requests carry the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The Content-Security-Policy of every dashboard answer.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// The middleware (see the module docs).
pub(crate) async fn guard<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    req: Request,
    next: Next,
) -> Response {
    let mut resp = check(&state, req, next).await;
    let h = resp.headers_mut();
    for (k, v) in [
        ("content-security-policy", CSP),
        ("referrer-policy", "no-referrer"),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    resp
}

async fn check<S: AuthorityStore>(state: &AppState<S>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    let safe = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if safe || !path.starts_with("/ui") || path == flotilla_api::links::Link::Login.path() {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let Some(session) = session_of(state, &parts.headers).await else {
        return not_signed_in(&parts);
    };
    let header_token = parts
        .headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"));
    let (token, body) = match header_token {
        Some(t) => (Some(t), body),
        None if form => {
            let Ok(bytes) = axum::body::to_bytes(body, FORM_LIMIT).await else {
                return layout::message(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "Too large",
                    "The form is larger than the dashboard takes.",
                );
            };
            (form_field(&bytes, "csrf"), Body::from(bytes))
        }
        None => (None, body),
    };
    if !token.is_some_and(|t| same_token(&t, &session.csrf)) {
        return layout::message(
            StatusCode::FORBIDDEN,
            "Refused: no valid CSRF token",
            "Every action carries the page's CSRF token. Reload the page and try again.",
        );
    }
    if !session.may_act() && path != "/ui/logout" {
        return layout::viewer_refused();
    }
    parts.extensions.insert(CsrfChecked);
    next.run(Request::from_parts(parts, body)).await
}

/// The value of `name` in a urlencoded form body (tokens are hex: no decoding).
fn form_field(body: &[u8], name: &str) -> Option<String> {
    std::str::from_utf8(body)
        .ok()?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_csrf_field_is_found_in_a_form() {
        assert_eq!(
            super::form_field(b"a=1&csrf=ab12&b=2", "csrf").as_deref(),
            Some("ab12")
        );
        assert_eq!(super::form_field(b"xcsrf=1", "csrf"), None);
    }
}
