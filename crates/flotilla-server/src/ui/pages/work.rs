//! The pages of the fleet's work: sessions, questions, revisions, releases and
//! rollouts, alerts — their routes and live views, registered in [`super`] with one
//! line each. Untrusted text on them goes through [`super::text`].

use super::super::layout::{self, Nav};
use super::super::live::{stream_url, Fragment};
use super::super::session::Session;
use super::{alerts, questions, releases, revisions, sessions};
use crate::state::AppState;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::Router;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The routes of every page here.
pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .merge(questions::routes::<S>())
        .merge(sessions::routes::<S>())
        .merge(revisions::routes::<S>())
        .merge(releases::routes::<S>())
        .merge(alerts::routes::<S>())
}

/// The live fragments of view `view` (with `arg`) when it is one of these pages'.
pub(crate) fn feed<S: AuthorityStore>(view: &str, arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    match view {
        questions::LIST_VIEW => questions::list_feed::<S>(arg),
        questions::VIEW => questions::feed::<S>(arg),
        sessions::LIST_VIEW => sessions::list_feed::<S>(arg),
        sessions::VIEW => sessions::feed::<S>(arg),
        revisions::LIST_VIEW => revisions::list_feed::<S>(arg),
        revisions::VIEW => revisions::feed::<S>(arg),
        releases::LIST_VIEW => releases::list_feed::<S>(arg),
        releases::VIEW => releases::feed::<S>(arg),
        alerts::VIEW => alerts::feed::<S>(arg),
        _ => None,
    }
}

/// A list page: `title`, then `head` (an introduction, filters), then the live list
/// `content` in `div#<event> sse-swap=<event>`, on view `view`'s event stream from
/// `since` (the hub's mark taken before `content` was rendered).
#[allow(clippy::too_many_arguments)]
pub(crate) fn list_page(
    session: &Session,
    nav: Nav,
    title: &str,
    view: &str,
    event: &str,
    since: &str,
    head: Markup,
    content: Markup,
) -> Response {
    let body = html! {
        h1 { (title) }
        (head)
        div id=(event) sse-swap=(event) { (content) }
    };
    object_page(
        session,
        nav,
        title,
        (view, None),
        since,
        StatusCode::OK,
        body,
    )
}

/// An object's page answered with `status`: `body` in the shell, on the event
/// stream of `view` (its name and argument) from `since`.
pub(crate) fn object_page(
    session: &Session,
    nav: Nav,
    title: &str,
    view: (&str, Option<&str>),
    since: &str,
    status: StatusCode,
    body: Markup,
) -> Response {
    let live = stream_url(view.0, view.1, since);
    let page = layout::page(session, nav, title, Some(&live), body);
    (status, Html(page.into_string())).into_response()
}
