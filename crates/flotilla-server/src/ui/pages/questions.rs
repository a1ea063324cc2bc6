//! Questions asked of a human: `/ui/questions` (open ones first, then the answered
//! ones) and `/ui/questions/{id}`, the page an on-call person opens from a
//! notification: the session, the tool, the exact tool input shown escaped
//! (markup and terminal escapes are text: control characters as `^[`), why the
//! gate asked and when, and an allow/deny answer with a note — the same effect as
//! `POST /v1/questions/{id}/answer` ([`crate::sessions::handlers::answer`]). An
//! answered question shows who answered what and when; an answer that comes after
//! another one is refused and shows the first. Live on [`Topic::Questions`].

use super::super::extract::{Acting, Signed};
use super::super::hub::Topic;
use super::super::layout::{self, Nav, Tone};
use super::super::live::Fragment;
use super::super::session::Session;
use super::frame;
use super::text::{json, one_line, shell_quote, size, visible, when, SHOWN_LIMIT};
use crate::failure::Failure;
use crate::sessions::handlers::{all_questions, answer, question_of};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use flotilla_api::links::Link;
use flotilla_api::sessions::{AnswerRequest, QuestionDto};
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The list's live view (`/ui/events?view=questions`).
pub(crate) const LIST_VIEW: &str = "questions";
/// One question's live view (`/ui/events?view=question&arg=ID`).
pub(crate) const VIEW: &str = "question";
const EVENT: &str = "question";
const LIST_EVENT: &str = "questions";
const TOPICS: &[Topic] = &[Topic::Questions];
/// Answered questions the list shows (the newest).
const ANSWERED_SHOWN: usize = 100;

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/questions", get(list_page::<S>))
        .route("/ui/questions/{id}", get(page::<S>))
        .route("/ui/questions/{id}/answer", post(answer_form::<S>))
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
    Some(vec![Fragment::new(
        EVENT,
        TOPICS,
        move |state, session| async move {
            match question_of(&state, id).await {
                Ok(q) => details(&q, &session, now_ms()),
                Err(f) => unavailable(&f),
            }
        },
    )])
}

fn unavailable(f: &Failure) -> Markup {
    html! { div.notice.bad role="alert" { "Cannot read the questions: " (f.message()) } }
}

/// The question's state as a mark: waiting, or allowed/denied by whom.
fn state_mark(q: &QuestionDto) -> Markup {
    match &q.doc.answer {
        None => layout::mark(Tone::Warn, "waiting for an answer"),
        Some(a) if a.decision == "allow" => {
            layout::mark(Tone::Good, &format!("allowed by {}", a.by))
        }
        Some(a) => layout::mark(Tone::Bad, &format!("denied by {}", a.by)),
    }
}

/// What the call would do in one line: a Bash command, an executor argv, a file
/// path, else the input's JSON.
fn summary(q: &QuestionDto) -> Markup {
    let input = &q.doc.tool_input;
    if let Some(c) = input.get("command").and_then(|c| c.as_str()) {
        return one_line(c);
    }
    if let Some(argv) = input.get("argv").and_then(|a| a.as_array()) {
        let words: Vec<String> = argv
            .iter()
            .map(|w| shell_quote(w.as_str().unwrap_or_default()))
            .collect();
        return one_line(&words.join(" "));
    }
    if let Some(p) = input.get("file_path").and_then(|p| p.as_str()) {
        return one_line(p);
    }
    one_line(&input.to_string())
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let mut qs = match all_questions(state).await {
        Ok(q) => q,
        Err(f) => return unavailable(&f),
    };
    qs.sort_by_key(|q| std::cmp::Reverse((q.asked_ms, q.id)));
    let (open, answered): (Vec<_>, Vec<_>) = qs.into_iter().partition(|q| q.doc.answer.is_none());
    let now = now_ms();
    let table = |rows: &[QuestionDto]| {
        html! {
            div.table-wrap {
                table.stack {
                    thead { tr { th { "Question" } th { "State" } th { "Session" } th { "Tool" } th { "Call" } th { "Asked" } } }
                    tbody {
                        @for q in rows {
                            tr data-row data-text=(format!("{} {} {}", q.id, q.session, q.doc.tool_name.to_lowercase()))
                                data-state=(if q.doc.answer.is_none() { "open" } else { "answered" }) {
                                td data-label="Question" { a href=(Link::Question(q.id).path()) { "#" (q.id) } }
                                td data-label="State" { (state_mark(q)) }
                                td data-label="Session" { a href=(Link::Session(q.session).path()) { (q.session) } }
                                td data-label="Tool" { code { (visible(&q.doc.tool_name, 100)) } }
                                td data-label="Call" { code.call { (summary(q)) } }
                                td data-label="Asked" { (when(q.asked_ms, now)) }
                            }
                        }
                    }
                }
            }
        }
    };
    html! {
        h2 { "Waiting for an answer (" (open.len()) ")" }
        @if open.is_empty() {
            p.muted #no-open { "No question waits." }
        } @else {
            (table(&open))
        }
        h2 { "Answered" }
        @if answered.is_empty() {
            p.muted { "None yet." }
        } @else {
            (table(&answered[..answered.len().min(ANSWERED_SHOWN)]))
            @if answered.len() > ANSWERED_SHOWN {
                p.muted { "Showing the newest " (ANSWERED_SHOWN) " of " (answered.len()) ": " code { "flotilla questions --all" } " lists them all." }
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
        p.muted { "A tool call the gate asked a human about waits here; its session resumes once it is answered." }
        div.filters { label { "Filter " input type="search" data-filter placeholder="id, session, tool"; } }
    };
    frame::list_page(
        &session,
        Nav::Questions,
        "Questions",
        LIST_VIEW,
        LIST_EVENT,
        &since,
        head,
        content,
    )
}

/// The call as asked: a command (or an executor's argv) as text, control
/// characters escaped, with its description.
fn the_call(q: &QuestionDto) -> Markup {
    let input = &q.doc.tool_input;
    let command = input.get("command").and_then(|c| c.as_str());
    let description = input.get("description").and_then(|c| c.as_str());
    html! {
        @if let Some(c) = command {
            pre.input #tool-command aria-label="The command" { code { (visible(c, SHOWN_LIMIT)) } }
            @if let Some(d) = description {
                p { span.muted { "Described as: " } (visible(d, 2048)) }
            }
        } @else {
            p #tool-summary { code.call { (summary(q)) } }
        }
    }
}

/// The input's JSON whole (cut at [`SHOWN_LIMIT`] with its size): open when there is
/// no command to show above it.
fn exact_input(q: &QuestionDto) -> Markup {
    let input = &q.doc.tool_input;
    let bytes = serde_json::to_string(input).map(|s| s.len()).unwrap_or(0);
    html! {
        details open[input.get("command").is_none()] {
            summary { "Exact input (JSON, " (size(bytes)) ")" }
            pre.input #tool-input { code { (json(input, SHOWN_LIMIT)) } }
        }
    }
}

/// Everything below the title; the answer form only while it is open, and only for
/// an operator.
fn details(q: &QuestionDto, session: &Session, now: i64) -> Markup {
    html! {
        p.lead {
            "Session " a href=(Link::Session(q.session).path()) { (q.session) }
            " asks to use " code { (visible(&q.doc.tool_name, 200)) } " — asked " (when(q.asked_ms, now)) "."
        }
        p #question-state { (state_mark(q)) }
        @if let Some(a) = &q.doc.answer {
            dl.facts #answer {
                dt { "Answer" } dd { b { (a.decision) } }
                dt { "By" } dd { (a.by) }
                dt { "When" } dd { (when(a.at_ms, now)) }
                @if let Some(n) = &a.note { dt { "Note" } dd { (visible(n, 4096)) } }
                dt { "Applied" } dd { @if q.doc.used { "yes: to the one call it answers" } @else { "not yet: the call has not come back" } }
                @if let Some(o) = &q.doc.outcome { dt { "Outcome" } dd { (visible(o, 4096)) } }
            }
        }
        h2 { "The call" }
        (the_call(q))
        h2 { "Why the gate asked" }
        p.reason #question-reason { (visible(&q.doc.reason, 8192)) }
        @if q.doc.answer.is_none() {
            @if session.may_act() {
                (answer_controls(q, session))
            } @else {
                p.muted { "Read-only: an operator answers." }
            }
        }
        (exact_input(q))
    }
}

fn answer_controls(q: &QuestionDto, session: &Session) -> Markup {
    let id = q.id.to_string();
    html! {
        h2 { "Answer" }
        form.answer method="post" action=(format!("/ui/questions/{}/answer", q.id)) {
            input type="hidden" name="csrf" value=(session.csrf);
            label for="note" { "Note for the agent (optional)" }
            textarea #note name="note" rows="3" hx-preserve="true" {}
            div.buttons {
                button.allow type="submit" name="decision" value="allow" { "✓ Allow this call" }
                button.deny type="submit" name="decision" value="deny" { "✗ Deny" }
            }
            p.muted { "The answer applies once, to exactly this input." }
        }
        (layout::command(&format!("flotilla question answer {id} allow|deny --note {}", shell_quote("…"))))
    }
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(id): Path<u64>,
) -> Response {
    render(&state, &session, id, StatusCode::OK, None).await
}

/// The question's page with `status` and, above it, `notice` (what became of an
/// answer given here).
async fn render<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    id: u64,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let since = state.ui.hub.mark();
    let q = match question_of(state, id).await {
        Ok(q) => q,
        Err(f) if f.0 == StatusCode::NOT_FOUND => {
            return layout::not_found(session, Nav::Questions, &format!("question {id}"));
        }
        Err(f) => return layout::message(f.0, "Cannot read the question", f.message()),
    };
    let body = html! {
        nav aria-label="Breadcrumb" { a href=(Link::Questions.path()) { "Questions" } " › #" (id) }
        h1 { "Question " (id) }
        @if let Some(n) = notice { (n) }
        div #question sse-swap=(EVENT) { (details(&q, session, now_ms())) }
    };
    let title = format!("Question {id}");
    frame::object_page(
        session,
        Nav::Questions,
        &title,
        (VIEW, Some(&id.to_string())),
        &since,
        status,
        body,
    )
}

/// The answer form's fields.
#[derive(serde::Deserialize)]
struct AnswerForm {
    decision: String,
    #[serde(default)]
    note: String,
}

/// `POST /ui/questions/{id}/answer`: answers as the signed-in operator (once), then
/// shows the question; an answer that comes second is refused (409) and the page
/// shows the first one.
async fn answer_form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Path(id): Path<u64>,
    Form(form): Form<AnswerForm>,
) -> Response {
    let note = form.note.trim();
    let req = AnswerRequest {
        decision: form.decision,
        note: (!note.is_empty()).then(|| note.to_string()),
    };
    match answer(&state, id, session.who.clone(), req).await {
        Ok(_) => Redirect::to(&Link::Question(id).path()).into_response(),
        Err(f) => {
            let what = if f.1.code == "answered" {
                "Your answer was not recorded: this question was answered in the meantime (below)."
            } else {
                "Your answer was not recorded."
            };
            let notice = html! { div.notice.bad role="alert" #answer-refused { p { b { (what) } } p { (f.message()) } } };
            render(&state, &session, id, f.0, Some(notice)).await
        }
    }
}
