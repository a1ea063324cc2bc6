//! The shell of the work pages (sessions, questions, revisions, releases, alerts):
//! a list page with its live list, and an object's page with its answer status,
//! each on its view's event stream.

use super::super::layout::{self, Nav};
use super::super::live::stream_url;
use super::super::session::Session;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{html, Markup};

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
