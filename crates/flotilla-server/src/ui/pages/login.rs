//! Signing in and out: `GET /ui/login` (the form; with `?token=` from a
//! `flotilla serve ui-link` URL, a one-button confirmation), `POST /ui/login` (the
//! operator credential or a sign-in link's, exchanged for a session cookie; rate
//! limited per client address), `POST /ui/logout`, and `/ui` → `/ui/`.
//!
//! Only the operator credential and sign-in links sign in: an agent's, a session
//! runtime's or an alert sender's credential is refused, saying so. A sign-in link
//! works once.

use super::super::extract::{session_of, Signed};
use super::super::layout;
use super::super::session::{clear_cookie, set_cookie};
use crate::auth::hash_secret;
use crate::state::AppState;
use axum::extract::{ConnectInfo, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use flotilla_api::links::Link;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Principal, UiLinkRedeem, UiRole};
use maud::html;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui", get(|| async { Redirect::permanent("/ui/") }))
        .route("/ui/login", get(form::<S>).post(sign_in::<S>))
        .route("/ui/logout", post(sign_out::<S>))
}

/// The client's address (the TCP peer), when the server recorded it.
pub struct ClientAddr(pub IpAddr);

impl<T: Sync> FromRequestParts<T> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &T) -> Result<Self, Self::Rejection> {
        Ok(ClientAddr(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip()),
        ))
    }
}

/// `GET /ui/login`'s query.
#[derive(Debug, Default, serde::Deserialize)]
pub struct LoginQuery {
    /// Where to go after signing in (a `/ui` path).
    #[serde(default)]
    pub next: Option<String>,
    /// A sign-in link's credential (`flotilla serve ui-link`).
    #[serde(default)]
    pub token: Option<String>,
}

/// `POST /ui/login`'s form.
#[derive(Debug, serde::Deserialize)]
pub struct LoginForm {
    /// The operator credential or a sign-in link's.
    pub credential: String,
    /// Where to go after signing in.
    #[serde(default)]
    pub next: String,
}

/// `next` when it is a dashboard path (never another site, never the sign-in page
/// itself), else the overview.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/ui" || n.starts_with("/ui/") || n.starts_with("/ui?"))
                && !n.starts_with("/ui/login")
                && !n.starts_with("/ui/logout")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.to_string()
        }
        _ => Link::Overview.path(),
    }
}

fn login_page(
    status: StatusCode,
    next: &str,
    token: Option<&str>,
    error: Option<&str>,
) -> Response {
    let body = layout::bare(
        "Sign in",
        html! {
            div.login {
                h1 { "Sign in to Flotilla" }
                @if let Some(e) = error {
                    div.notice.bad role="alert" { (e) }
                }
                form method="post" action=(Link::Login.path()) {
                    input type="hidden" name="next" value=(next);
                    @if let Some(t) = token {
                        p { "This is a one-time sign-in link: it opens one dashboard session, then stops working." }
                        input type="hidden" name="credential" value=(t);
                    } @else {
                        label for="credential" { "Operator credential or sign-in link token" }
                        input #credential type="password" name="credential" autocomplete="off" required autofocus
                            aria-describedby="credential-help";
                        p #credential-help .muted {
                            "The operator credential (" code { "flt-op-…" } ") is in the authority's "
                            code { "operator.json" } ". Or run " code { "flotilla serve ui-link" }
                            " on the authority and open the URL it prints (" code { "--viewer" } " for read-only)."
                        }
                    }
                    div.actions { button.primary type="submit" { "Sign in" } }
                }
            }
        },
    );
    (status, Html(body.into_string())).into_response()
}

async fn form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    headers: HeaderMap,
    Query(q): Query<LoginQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    if q.token.is_none() && session_of(&state, &headers).await.is_some() {
        return Redirect::to(&next).into_response();
    }
    login_page(StatusCode::OK, &next, q.token.as_deref(), None)
}

async fn sign_in<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    ClientAddr(client): ClientAddr,
    Form(f): Form<LoginForm>,
) -> Response {
    let next = safe_next(Some(&f.next));
    if let Err(wait) = state.ui.sign_in.take(client, Instant::now()) {
        let mut r = layout::message(
            StatusCode::TOO_MANY_REQUESTS,
            "Too many sign-in attempts",
            &format!(
                "Too many sign-in attempts from this address: try again in {} s.",
                wait.as_secs().max(1)
            ),
        );
        r.headers_mut().insert(
            header::RETRY_AFTER,
            wait.as_secs().max(1).to_string().parse().expect("digits"),
        );
        return r;
    }
    let credential = f.credential.trim();
    let refuse = |status, msg: &str| login_page(status, &next, None, Some(msg));
    if credential.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "Paste a credential to sign in.");
    }
    let hash = hash_secret(credential);
    let principal = match state.store.principal(hash.clone()).await {
        Ok(p) => p,
        Err(e) => {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("The authority's store failed: {e}"),
            )
        }
    };
    let (who, role, link) = match principal {
        Some(Principal::Operator { name }) => (name, UiRole::Operator, None),
        Some(Principal::UiLink { .. }) => match state.store.redeem_ui_link(hash.clone(), now_ms()).await {
            Ok(UiLinkRedeem::SignedIn { id, role }) => (format!("ui-link {id}"), role, Some(id)),
            Ok(UiLinkRedeem::Used) => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "This sign-in link was already used: it works once. Make another with `flotilla serve ui-link`.",
                )
            }
            Ok(UiLinkRedeem::Expired) => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "This sign-in link expired. Make another with `flotilla serve ui-link`.",
                )
            }
            Ok(UiLinkRedeem::Revoked | UiLinkRedeem::Unknown) => {
                return refuse(StatusCode::UNAUTHORIZED, "This sign-in link was revoked.")
            }
            Err(e) => {
                return refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("The authority's store failed: {e}"),
                )
            }
        },
        Some(Principal::Agent { host }) => {
            return refuse(
                StatusCode::FORBIDDEN,
                &format!("That is the agent credential of host `{host}`: agents never sign in to the dashboard. Use the operator credential or a `flotilla serve ui-link` URL."),
            )
        }
        Some(Principal::Session { id }) => {
            return refuse(
                StatusCode::FORBIDDEN,
                &format!("That is the credential of session {id}'s runtime: sessions never sign in to the dashboard."),
            )
        }
        Some(Principal::Alerts { name }) => {
            return refuse(
                StatusCode::FORBIDDEN,
                &format!("That is the credential of alert sender `{name}`: it may only post alerts, never sign in."),
            )
        }
        Some(Principal::Metrics { name }) => {
            return refuse(
                StatusCode::FORBIDDEN,
                &format!("That is the credential of metrics scraper `{name}`: it may only read /metrics, never sign in."),
            )
        }
        None => return refuse(StatusCode::UNAUTHORIZED, "Unknown or revoked credential."),
    };
    let session = state.ui.sessions.start(who, role, hash, link);
    tracing::info!(who = %session.who, role = session.role.as_str(), "dashboard sign-in");
    let mut r = Redirect::to(&next).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        set_cookie(&session.id)
            .parse()
            .expect("hex is a header value"),
    );
    r
}

async fn sign_out<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    state.ui.sessions.end(&session.id);
    let mut r = Redirect::to(&Link::Login.path()).into_response();
    r.headers_mut().insert(
        header::SET_COOKIE,
        clear_cookie().parse().expect("a header value"),
    );
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn next_stays_on_the_dashboard() {
        use super::safe_next;
        assert_eq!(safe_next(Some("/ui/hosts/h1")), "/ui/hosts/h1");
        assert_eq!(safe_next(Some("https://evil.example/")), "/ui/");
        assert_eq!(safe_next(Some("//evil.example/ui/")), "/ui/");
        assert_eq!(safe_next(Some("/uix")), "/ui/");
        assert_eq!(safe_next(Some("/ui/login?next=/ui/")), "/ui/");
        assert_eq!(safe_next(None), "/ui/");
    }
}
