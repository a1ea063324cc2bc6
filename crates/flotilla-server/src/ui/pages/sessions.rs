//! Agent sessions: `/ui/sessions` (every session, its derived state, mode and
//! runtime) and `/ui/sessions/{id}` (its facts, open questions and the transcript of
//! its events, live), with a message to send and the runtime to stop — the same
//! effects as `POST /v1/sessions/{id}/messages` and `DELETE
//! /v1/sessions/{id}/runtime` ([`crate::sessions::handlers::send`], [`stop`]), each
//! with its `flotilla session …` command. Live on [`Topic::Sessions`] and
//! [`Topic::Questions`].

use super::super::extract::{Acting, Signed};
use super::super::hub::Topic;
use super::super::layout::{self, Nav, Tone};
use super::super::live::Fragment;
use super::super::session::Session;
use super::frame;
use super::text::{json, one_line, prefix, shell_quote, visible, when};
use crate::failure::Failure;
use crate::sessions::handlers::{all_questions, all_sessions, dto, events_of, send, stop};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use flotilla_api::links::Link;
use flotilla_api::sessions::{SessionDto, SessionEventDto, SessionState};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The list's live view.
pub(crate) const LIST_VIEW: &str = "sessions";
/// One session's live view (`arg` = its id).
pub(crate) const VIEW: &str = "session";
const LIST_EVENT: &str = "sessions";
const FACTS_EVENT: &str = "session";
const EVENTS_EVENT: &str = "transcript";
const TOPICS: &[Topic] = &[Topic::Sessions, Topic::Questions];
/// The transcript shows the session's last this many events.
const EVENTS_SHOWN: usize = 500;
/// How much of one event the transcript shows (bytes).
const EVENT_LIMIT: usize = 4096;

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/sessions", get(list_page::<S>))
        .route("/ui/sessions/{id}", get(page::<S>))
        .route("/ui/sessions/{id}/messages", post(message_form::<S>))
        .route("/ui/sessions/{id}/stop", post(stop_form::<S>))
}

pub(crate) fn list_feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::new(
        LIST_EVENT,
        TOPICS,
        |state, _session| async move { list(&state).await },
    )])
}

pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    let id: u64 = arg?.parse().ok()?;
    Some(vec![
        Fragment::new(FACTS_EVENT, TOPICS, move |state, _session| async move {
            facts(&state, id).await
        }),
        Fragment::new(
            EVENTS_EVENT,
            &[Topic::Sessions],
            move |state, _session| async move { transcript(&state, id).await },
        ),
    ])
}

fn unavailable(f: &Failure) -> Markup {
    // Sessions not set up is a state of this authority, not an error.
    if f.1.code == "sessions-off" {
        return html! {
            div.notice role="status" {
                p { b { "Agent sessions are off on this authority." } }
                p { "They start when the authority's directory holds a " code { "sessions.toml" }
                    " (see \"Agent sessions\" in the README) and " code { "flotilla serve" } " is started again." }
            }
        };
    }
    html! { div.notice.bad role="alert" { "Cannot read the sessions: " (f.message()) } }
}

/// A session's state as a mark.
fn state_mark(s: &SessionDto) -> Markup {
    match s.state {
        SessionState::New => layout::mark(Tone::Neutral, "new"),
        SessionState::Working => layout::mark(Tone::Good, "working"),
        SessionState::WaitingForAnswer => layout::mark(Tone::Warn, "waiting for an answer"),
        SessionState::Idle => layout::mark(Tone::Neutral, "idle"),
        SessionState::Failed => layout::mark(Tone::Bad, "failed"),
    }
}

fn state_word(s: &SessionDto) -> &'static str {
    match s.state {
        SessionState::New => "new",
        SessionState::Working => "working",
        SessionState::WaitingForAnswer => "waiting",
        SessionState::Idle => "idle",
        SessionState::Failed => "failed",
    }
}

fn mode(s: &SessionDto) -> Markup {
    html! {
        code { (s.doc.mode.as_str()) }
        @if s.mode_mismatch {
            " " (layout::mark(Tone::Bad, &format!("runtime reports {}", s.doc.observed_mode.as_deref().unwrap_or("?"))))
        }
    }
}

fn runtime(s: &SessionDto, now: i64) -> Markup {
    html! {
        @match (&s.doc.runtime, s.runtime_alive) {
            (Some(r), true) => { (r.describe()) ", boot " (r.boot) ", since " (when(r.booted_ms, now)) }
            _ => { "none" }
        }
    }
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let sessions = match all_sessions(state).await {
        Ok(s) => s,
        Err(f) => return unavailable(&f),
    };
    let now = now_ms();
    html! {
        @if sessions.is_empty() {
            p.muted { "No session yet: " code { "flotilla session create --repo NAME --prompt …" } " makes one." }
        } @else {
            div.table-wrap {
                table.stack {
                    thead { tr { th { "Session" } th { "State" } th { "Repository" } th { "Mode" } th { "Runtime" } th { "Questions" } th { "Created" } } }
                    tbody {
                        @for s in &sessions {
                            tr data-row data-text=(format!("{} {} {}", s.id, s.doc.repo.to_lowercase(), s.doc.created_by.to_lowercase())) data-state=(state_word(s)) {
                                td data-label="Session" { a href=(Link::Session(s.id).path()) { (s.id) } }
                                td data-label="State" { (state_mark(s)) }
                                td data-label="Repository" { (visible(&s.doc.repo, 200)) }
                                td data-label="Mode" { (mode(s)) }
                                td data-label="Runtime" { (runtime(s, now)) }
                                td data-label="Questions" { (s.open_questions) " open" }
                                td data-label="Created" { (when(s.created_ms, now)) " by " (visible(&s.doc.created_by, 200)) }
                            }
                        }
                    }
                }
            }
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
        div.filters {
            label { "Filter " input type="search" data-filter placeholder="id, repository, who"; }
            label { "State " select data-filter-state {
                option value="" { "any" }
                @for s in ["new", "working", "waiting", "idle", "failed"] { option value=(s) { (s) } }
            } }
        }
    };
    frame::list_page(
        &session,
        Nav::Sessions,
        "Sessions",
        LIST_VIEW,
        LIST_EVENT,
        &since,
        head,
        content,
    )
}

/// The session's facts and open questions now.
async fn facts<S: AuthorityStore>(state: &AppState<S>, id: u64) -> Markup {
    let s = match dto(state, id).await {
        Ok(s) => s,
        Err(f) => return unavailable(&f),
    };
    let mut open: Vec<_> = match all_questions(state).await {
        Ok(q) => q
            .into_iter()
            .filter(|q| q.session == id && q.doc.answer.is_none())
            .collect(),
        Err(f) => return unavailable(&f),
    };
    open.sort_by_key(|q| q.id);
    let now = now_ms();
    let d = &s.doc;
    html! {
        dl.facts {
            dt { "State" } dd #session-state { (state_mark(&s)) }
            dt { "Mode" } dd { (mode(&s)) }
            dt { "Runtime" } dd #session-runtime { (runtime(&s, now)) }
            @if let Some(end) = &d.last_end {
                dt { "Last runtime ended" } dd {
                    (visible(&end.how, 100))
                    @if let Some(c) = end.code { " (exit " (c) ")" }
                    " " (when(end.at_ms, now))
                    @if let Some(detail) = &end.detail { pre.input { code { (visible(detail, 4096)) } } }
                }
            }
            dt { "Repository" } dd { (visible(&d.repo, 200)) " on " (visible(&d.host, 200)) }
            @if let Some(base) = &d.base_commit { dt { "Base commit" } dd { code { (visible(base, 100)) } } }
            dt { "Created" } dd { (when(s.created_ms, now)) " by " (visible(&d.created_by, 200)) }
            dt { "Runtimes booted" } dd { (d.boots) }
            @if !d.pending.is_empty() { dt { "Messages waiting" } dd { (d.pending.len()) } }
            @if d.waiting_for_capacity { dt { "Waiting" } dd { "for a runtime slot (max_runtimes reached)" } }
        }
        @if !open.is_empty() {
            div.notice.warn role="status" {
                p { b { "Waiting for an answer:" } }
                ul {
                    @for q in &open {
                        li { a href=(Link::Question(q.id).path()) { "Question " (q.id) } ": " code { (visible(&q.doc.tool_name, 100)) } }
                    }
                }
            }
        }
    }
}

/// One event in a line or two: what it says in words, and its JSON cut at
/// [`EVENT_LIMIT`].
fn event_row(e: &SessionEventDto, now: i64) -> Markup {
    let v = &e.event;
    let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or("event");
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let summary = match kind {
        "message" => html! { (visible(&s("text"), EVENT_LIMIT)) },
        "question" => {
            let q = v
                .get("question")
                .and_then(|q| q.as_u64())
                .unwrap_or_default();
            let input = v.get("input").cloned().unwrap_or_default();
            let call = input
                .get("command")
                .and_then(|c| c.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| input.to_string());
            html! { a href=(Link::Question(q).path()) { "question " (q) } ": " code { (visible(&s("tool"), 100)) } " " code.call { (one_line(&call)) } }
        }
        "answer" => {
            let q = v
                .get("question")
                .and_then(|q| q.as_u64())
                .unwrap_or_default();
            html! { a href=(Link::Question(q).path()) { "question " (q) } " answered " b { (s("decision")) } " by " (visible(&s("by"), 200)) }
        }
        "gate" => {
            html! { code { (visible(&s("tool"), 100)) } ": " b { (s("decision")) } " — " (visible(prefix(&s("reason"), EVENT_LIMIT), EVENT_LIMIT)) }
        }
        "runtime-booted" => {
            let what = match v["pod"]["name"].as_str() {
                Some(pod) => format!("pod {pod}"),
                None => format!("pid {}", v["pid"]),
            };
            html! { "runtime booted: " (what) ", boot " (v["boot"].to_string()) }
        }
        "runtime-exited" => {
            html! { "runtime exited: code " (v["code"].to_string()) @if !s("stderr").is_empty() { pre.input { code { (visible(&s("stderr"), EVENT_LIMIT)) } } } }
        }
        _ => fields(v),
    };
    html! {
        li data-seq=(e.seq) {
            span.when { (when(e.at_ms, now)) }
            " " span.kind { (visible(kind, 100)) }
            " " span.what { (summary) }
        }
    }
}

/// An event's fields but its kind, `name: value` (strings as text, the rest as
/// JSON), each cut at [`EVENT_LIMIT`].
fn fields(v: &serde_json::Value) -> Markup {
    let Some(map) = v.as_object() else {
        return html! { code.call { (json(v, EVENT_LIMIT)) } };
    };
    html! {
        @for (k, x) in map.iter().filter(|(k, _)| k.as_str() != "kind") {
            span.field {
                span.muted { (visible(k, 100)) ": " }
                @match x.as_str() {
                    Some(text) => { (visible(text, EVENT_LIMIT)) }
                    None => { code { (visible(&x.to_string(), EVENT_LIMIT)) } }
                }
            }
            " "
        }
    }
}

/// The session's last [`EVENTS_SHOWN`] events, oldest first.
async fn transcript<S: AuthorityStore>(state: &AppState<S>, id: u64) -> Markup {
    let events = match events_of(state, id, 0).await {
        Ok(e) => e,
        Err(f) => return unavailable(&f),
    };
    let skip = events.len().saturating_sub(EVENTS_SHOWN);
    let now = now_ms();
    html! {
        @if skip > 0 {
            p.muted { (skip) " earlier events: " code { "flotilla session events " (id) } }
        }
        ol.transcript #transcript data-follow aria-live="polite" {
            @for e in &events[skip..] { (event_row(e, now)) }
        }
    }
}

fn controls(id: u64, session: &Session) -> Markup {
    html! {
        section.actions aria-labelledby="actions-title" {
            h2 #actions-title { "Act" }
            form method="post" action=(format!("/ui/sessions/{id}/messages")) {
                input type="hidden" name="csrf" value=(session.csrf);
                label for="message" { "Message" }
                textarea #message name="text" rows="3" required {}
                button type="submit" { "Send" }
            }
            (layout::command(&format!("flotilla session send {id} {}", shell_quote("…"))))
            form method="post" action=(format!("/ui/sessions/{id}/stop")) {
                input type="hidden" name="csrf" value=(session.csrf);
                button type="submit" { "■ Stop the runtime" }
                span.muted { " (the next message boots a new one)" }
            }
            (layout::command(&format!("flotilla session stop {id}")))
        }
    }
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(id): Path<u64>,
) -> Response {
    render(&state, &session, id, StatusCode::OK, None).await
}

async fn render<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    id: u64,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let since = state.ui.hub.mark();
    if let Err(f) = dto(state, id).await {
        return if f.0 == StatusCode::NOT_FOUND {
            layout::not_found(session, Nav::Sessions, &format!("session {id}"))
        } else {
            layout::message(f.0, "Cannot read the session", f.message())
        };
    }
    let body = html! {
        nav aria-label="Breadcrumb" { a href=(Link::Sessions.path()) { "Sessions" } " › " (id) }
        h1 { "Session " (id) }
        @if let Some(n) = notice { (n) }
        div #session sse-swap=(FACTS_EVENT) { (facts(state, id).await) }
        h2 { "Transcript" }
        div #events sse-swap=(EVENTS_EVENT) { (transcript(state, id).await) }
        @if session.may_act() { (controls(id, session)) }
    };
    let title = format!("Session {id}");
    frame::object_page(
        session,
        Nav::Sessions,
        &title,
        (VIEW, Some(&id.to_string())),
        &since,
        status,
        body,
    )
}

#[derive(serde::Deserialize)]
struct MessageForm {
    text: String,
}

/// `POST /ui/sessions/{id}/messages`: sends the message as the operator.
async fn message_form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Path(id): Path<u64>,
    Form(form): Form<MessageForm>,
) -> Response {
    match send(&state, id, form.text).await {
        Ok(_) => Redirect::to(&Link::Session(id).path()).into_response(),
        Err(f) => refused(&state, &session, id, &f).await,
    }
}

/// `POST /ui/sessions/{id}/stop`: tears the runtime down.
async fn stop_form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Path(id): Path<u64>,
) -> Response {
    match stop(&state, id).await {
        Ok(_) => Redirect::to(&Link::Session(id).path()).into_response(),
        Err(f) => refused(&state, &session, id, &f).await,
    }
}

async fn refused<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    id: u64,
    f: &Failure,
) -> Response {
    let notice = html! { div.notice.bad role="alert" { p { b { "Not done: " } (f.message()) } } };
    render(state, session, id, f.0, Some(notice)).await
}
