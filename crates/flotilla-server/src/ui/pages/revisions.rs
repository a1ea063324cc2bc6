//! Revisions: `/ui/revisions` (the history — digest, who published it, when,
//! which one is selected — and the selection log) and `/ui/revisions/{digest}` (one
//! revision, its diff against the selected one or `?from=`, and select with
//! compare-and-swap). The select form carries the selection (index and revision)
//! the page was rendered against; a select after another one is refused by
//! [`crate::revisions::select_revision`] (the `PUT /v1/selection` logic) or, when
//! the same revision came back in between, by the index, and the page shows who
//! changed the selection, to what and when — nothing changes. Live on
//! [`Topic::Selection`].

use super::super::extract::{Acting, Signed};
use super::super::hub::Topic;
use super::super::layout::{self, short_digest, Nav, Tone};
use super::super::live::Fragment;
use super::super::session::Session;
use super::frame;
use super::text::{visible, when};
use crate::api::{DiffResponse, SelectRequest, SelectionDto};
use crate::failure::Failure;
use crate::revisions::{diff_of, history_of, select_revision};
use crate::state::{selection_dto, AppState};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use flotilla_api::links::Link;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The history's live view.
pub(crate) const LIST_VIEW: &str = "revisions";
/// One revision's live view (`arg` = its digest).
pub(crate) const VIEW: &str = "revision";
const LIST_EVENT: &str = "revisions";
const SELECTED_EVENT: &str = "selected";
const TOPICS: &[Topic] = &[Topic::Selection];
/// Selection log entries the history page shows (the newest).
const SELECTIONS_SHOWN: usize = 50;

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/revisions", get(list_page::<S>))
        .route("/ui/revisions/{digest}", get(page::<S>))
        .route("/ui/revisions/{digest}/select", post(select_form::<S>))
}

pub(crate) fn list_feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::new(
        LIST_EVENT,
        TOPICS,
        |state, _session| async move { list(&state).await },
    )])
}

pub(crate) fn feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::new(
        SELECTED_EVENT,
        TOPICS,
        |state, _session| async move { selected_now(&state) },
    )])
}

fn unavailable(f: &Failure) -> Markup {
    html! { div.notice.bad role="alert" { "Cannot read the revisions: " (f.message()) } }
}

fn digest_link(d: &str) -> Markup {
    html! { a href=(Link::Revision(d.to_string()).path()) title=(d) { code { (short_digest(d)) } } }
}

/// One selection: its index, revision, who and when.
fn selection_line(s: &SelectionDto, now: i64) -> Markup {
    html! { "index " (s.index) ": " (digest_link(&s.revision)) " selected by " (visible(&s.selected_by, 200)) " " (when(s.selected_ms, now)) }
}

/// What is selected now (from memory, as the snapshot polls see it).
fn selected_now<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    match state.current() {
        None => html! { p #selected-now { "Nothing is selected yet." } },
        Some(c) => {
            html! { p #selected-now { "Selected now: " (selection_line(&selection_dto(&c.selection), now_ms())) } }
        }
    }
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let h = match history_of(state).await {
        Ok(h) => h,
        Err(f) => return unavailable(&f),
    };
    let now = now_ms();
    html! {
        (selected_now(state))
        h2 { "Revisions" }
        @if h.revisions.is_empty() {
            p.muted { "None yet: " code { "flotilla config publish" } " publishes the inventory as one." }
        } @else {
            div.table-wrap {
                table.stack {
                    thead { tr { th { "Revision" } th { "Selected" } th { "Published by" } th { "When" } } }
                    tbody {
                        @for r in &h.revisions {
                            tr data-row data-text=(r.revision.clone()) data-state=(if r.selected { "selected" } else { "" }) {
                                td data-label="Revision" { (digest_link(&r.revision)) }
                                td data-label="Selected" { @if r.selected { (layout::mark(Tone::Good, "selected")) } @else { "—" } }
                                td data-label="Published by" { (visible(&r.published_by, 200)) }
                                td data-label="When" { (when(r.created_ms, now)) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Selection log" }
        ol.log reversed {
            @for s in h.selections.iter().take(SELECTIONS_SHOWN) { li { (selection_line(s, now)) } }
        }
    }
}

async fn list_page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    let since = state.ui.hub.mark();
    let content = list(&state).await;
    let head = html! {
        div.filters { label { "Filter " input type="search" data-filter placeholder="sha256:…"; } }
    };
    frame::list_page(
        &session,
        Nav::Revisions,
        "Revisions",
        LIST_VIEW,
        LIST_EVENT,
        &since,
        head,
        content,
    )
}

#[derive(serde::Deserialize, Default)]
struct DiffQuery {
    /// Diff from this revision (default: the selected one).
    from: Option<String>,
}

fn diff_view(d: &DiffResponse) -> Markup {
    html! {
        p { "From " (digest_link(&d.from)) " to " (digest_link(&d.to)) ": " (d.changes.len()) " change(s)." }
        @if !d.changes.is_empty() {
            ul.diff #diff {
                @for c in &d.changes {
                    li {
                        b { (c.change) } " " (c.kind) " " code { (visible(&c.name, 200)) }
                        @if c.restarts { " " (layout::mark(Tone::Warn, "restarts when applied")) }
                        @if !c.details.is_empty() {
                            ul { @for line in &c.details { li { code { (visible(line, 2048)) } } } }
                        }
                    }
                }
            }
        }
    }
}

/// The select form: carries the selection the page shows (`index`, `expect`).
fn select_controls(digest: &str, current: Option<&SelectionDto>, session: &Session) -> Markup {
    let expect = current.map(|c| c.revision.clone()).unwrap_or_default();
    let index = current.map_or(0, |c| c.index);
    let cmd = if expect.is_empty() {
        format!("flotilla config select {digest}")
    } else {
        format!("flotilla config select {digest} --expect {expect}")
    };
    html! {
        form.select method="post" action=(format!("{}/select", Link::Revision(digest.to_string()).path())) {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="index" value=(index);
            input type="hidden" name="expect" value=(expect);
            button type="submit" #select { "Select this revision" }
            @if let Some(c) = current {
                span.muted { " (replacing index " (c.index) ", " code { (short_digest(&c.revision)) } ")" }
            }
        }
        (layout::command(&cmd))
    }
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(digest): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Response {
    render(&state, &session, &digest, q.from, StatusCode::OK, None).await
}

async fn render<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    digest: &str,
    from: Option<String>,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let since = state.ui.hub.mark();
    let h = match history_of(state).await {
        Ok(h) => h,
        Err(f) => return layout::message(f.0, "Cannot read the revisions", f.message()),
    };
    // The digest, or a unique prefix of it (with or without `sha256:`).
    let matching: Vec<_> = h
        .revisions
        .iter()
        .filter(|r| {
            r.revision == digest
                || (digest.len() >= 4
                    && (r.revision.starts_with(digest)
                        || r.revision
                            .strip_prefix("sha256:")
                            .is_some_and(|hex| hex.starts_with(digest))))
        })
        .collect();
    let [rev] = matching[..] else {
        return layout::not_found(
            session,
            Nav::Revisions,
            &format!("revision `{digest}` (or none by that prefix alone)"),
        );
    };
    let digest = rev.revision.as_str();
    let current = state.current().map(|c| selection_dto(&c.selection));
    let from = from.or_else(|| current.as_ref().map(|c| c.revision.clone()));
    let diff = match &from {
        Some(f) if f != digest => Some(diff_of(state, f, digest).await),
        _ => None,
    };
    let now = now_ms();
    let body = html! {
        nav aria-label="Breadcrumb" { a href=(Link::Revisions.path()) { "Revisions" } " › " code { (short_digest(digest)) } }
        h1 { "Revision " code { (short_digest(digest)) } }
        @if let Some(n) = notice { (n) }
        div sse-swap=(SELECTED_EVENT) { (selected_now(state)) }
        dl.facts {
            dt { "Digest" } dd { code.digest { (digest) } }
            dt { "Published" } dd { (when(rev.created_ms, now)) " by " (visible(&rev.published_by, 200)) }
            dt { "Selected" } dd { @if rev.selected { (layout::mark(Tone::Good, "yes")) } @else { "no" } }
        }
        h2 { "Changes" }
        form.diff-from method="get" {
            label { "Compared with " select name="from" {
                @for r in &h.revisions {
                    option value=(r.revision) selected[from.as_deref() == Some(r.revision.as_str())] {
                        (short_digest(&r.revision)) @if r.selected { " (selected)" }
                    }
                }
            } }
            button type="submit" { "Compare" }
        }
        @match &diff {
            None => { p.muted { "This is the revision compared with." } }
            Some(Ok(d)) => { (diff_view(d)) }
            Some(Err(f)) => { div.notice.bad role="alert" { (f.message()) } }
        }
        @if let Some(f) = &from { @if f != digest {
            (layout::command(&format!("flotilla config diff {f} {digest}")))
        } }
        @if !rev.selected && session.may_act() {
            h2 { "Select" }
            (select_controls(digest, current.as_ref(), session))
        }
    };
    let title = format!("Revision {}", short_digest(digest));
    frame::object_page(
        session,
        Nav::Revisions,
        &title,
        (VIEW, Some(digest)),
        &since,
        status,
        body,
    )
}

#[derive(serde::Deserialize)]
struct SelectForm {
    /// The selection index the page was rendered against (0: none).
    index: u64,
    /// The revision selected then (empty: none).
    #[serde(default)]
    expect: String,
}

/// The conflict: the selection changed since the form was rendered.
fn conflict(expected: &SelectForm, now_selected: Option<&SelectionDto>) -> Markup {
    let now = now_ms();
    html! {
        div.notice.bad role="alert" #select-conflict {
            p { b { "Not selected: the selection changed since this page was shown. Nothing changed." } }
            p { "This page expected index " (expected.index)
                @if !expected.expect.is_empty() { " (" code { (short_digest(&expected.expect)) } ")" } "." }
            @if let Some(c) = now_selected {
                p { "Now: " (selection_line(c, now)) "." }
            }
            p { "Look at the change, then select again if it still should be." }
        }
    }
}

/// `POST /ui/revisions/{digest}/select`: selects it only if the selection is still
/// the one the page showed.
async fn select_form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Path(digest): Path<String>,
    Form(form): Form<SelectForm>,
) -> Response {
    let current = state.current().map(|c| selection_dto(&c.selection));
    let stale = current.as_ref().map_or(0, |c| c.index) != form.index;
    let outcome = if stale {
        None
    } else {
        let req = SelectRequest {
            revision: digest.clone(),
            expect: (!form.expect.is_empty()).then(|| form.expect.clone()),
        };
        Some(select_revision(&state, session.who.clone(), req).await)
    };
    match outcome {
        Some(Ok(_)) => Redirect::to(&Link::Revision(digest).path()).into_response(),
        Some(Err(f)) if f.0 != StatusCode::CONFLICT => {
            let notice = html! { div.notice.bad role="alert" { p { b { "Not selected: " } (f.message()) } } };
            render(&state, &session, &digest, None, f.0, Some(notice)).await
        }
        _ => {
            let now_selected = state.current().map(|c| selection_dto(&c.selection));
            let notice = conflict(&form, now_selected.as_ref());
            render(
                &state,
                &session,
                &digest,
                None,
                StatusCode::CONFLICT,
                Some(notice),
            )
            .await
        }
    }
}
