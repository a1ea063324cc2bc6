//! A component's log on its page, following live: `GET
//! /ui/components/{name}/log` is a Server-Sent Events stream of its new lines (event
//! `log`, HTML appended to the log box), read through the component's agent exactly
//! as `flotilla logs -f` reads it (`Call::Logs` with `from` = the end of the last
//! answer), every [`POLL`]. Lines are shown as text: control characters visible, a
//! line longer than [`MAX_LINE`] characters cut with how much was left out.
//! Bounded: a client that does not read is dropped ([`BUFFER`]).

use super::super::super::extract::{still_valid, Signed};
use super::super::super::layout;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_exec::remote::{Call, Reply};
use flotilla_model::inventory::TransportKind;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the agent is asked for new lines.
pub const POLL: Duration = Duration::from_secs(1);
/// Lines shown when the page opens.
pub const FIRST_LINES: usize = 200;
/// A longer line is cut to this many characters.
pub const MAX_LINE: usize = 2000;
/// Events a client may leave unread before it is dropped.
pub const BUFFER: usize = 16;
/// Time allowed for the agent to answer one read.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new().route("/ui/components/{name}/log", get(stream::<S>))
}

/// The log box of component `name`, connected to its stream, with its
/// following/paused state.
pub(crate) fn pane(name: &str) -> Markup {
    let url = format!("{}/log", Link::Component(name.to_string()).path());
    html! {
        section.logs aria-labelledby="log-title" {
            div.log-head {
                h2 #log-title { "Log" }
                span.log-state data-log-state role="status" { "following" }
                button type="button" data-log-follow hidden { "Follow the end" }
            }
            div hx-ext="sse" sse-connect=(url) {
                pre.log #log data-follow tabindex="0" aria-labelledby="log-title" sse-swap="log" hx-swap="beforeend" {}
            }
            p.muted { "Scroll up to pause following; scroll back to the end (or press the button) to follow again." }
            (layout::command(&format!("flotilla logs -f {}", shlex::try_quote(name).map(|s| s.into_owned()).unwrap_or_default())))
        }
    }
}

/// One line as shown: its text (the stamped log format's prefix taken off), cut at
/// [`MAX_LINE`] characters.
fn line(raw: &str) -> Markup {
    let text = flotilla_exec::logs::text_of(raw);
    let (shown, left) = match text.char_indices().nth(MAX_LINE) {
        Some((at, _)) => (&text[..at], text.len() - at),
        None => (text, 0),
    };
    html! {
        span.line { (layout::visible(shown))
            @if left > 0 { span.cut { " … (" (left) " more bytes not shown)" } }
        } "\n"
    }
}

async fn stream<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(name): Path<String>,
) -> Response {
    let (tx, rx) = mpsc::channel::<Event>(BUFFER);
    tokio::spawn(follow(state, session, name, tx));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    let h = resp.headers_mut();
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Sends `html` as a `log` event; false when the client is gone or not reading.
fn send(tx: &mpsc::Sender<Event>, html: Markup) -> bool {
    tx.try_send(Event::default().event("log").data(html.into_string()))
        .is_ok()
}

async fn follow<S: AuthorityStore>(
    state: Arc<AppState<S>>,
    session: Arc<super::super::super::session::Session>,
    name: String,
    tx: mpsc::Sender<Event>,
) {
    let note = |text: String| html! { span.line.note { "— " (layout::visible(&text)) " —" } "\n" };
    let Some(topology) = state.current().map(|c| c.topology) else {
        send(&tx, note("no revision is selected".into()));
        return;
    };
    let Some(c) = topology.id(&name).map(|id| topology.component(id)) else {
        send(
            &tx,
            note(format!("`{name}` is not in the selected revision")),
        );
        return;
    };
    let host = c.host.clone();
    if topology.hosts.get(&host).map(|h| h.transport) != Some(TransportKind::Agent) {
        send(
            &tx,
            note(format!(
                "`{name}` runs on `{host}`, which has no agent: its log is read there (`flotilla logs -f {name}`)"
            )),
        );
        return;
    }
    let fleet = crate::controller::queue::fleet(&state, &topology);
    let mut from: Option<u64> = None;
    let mut failing = false;
    let mut checked = tokio::time::Instant::now();
    loop {
        let call = Call::Logs {
            component: name.clone(),
            lines: if from.is_none() { FIRST_LINES } else { 0 },
            project: topology.project.clone(),
            from,
        };
        match fleet.call(&host, call, READ_TIMEOUT, None).await {
            Ok(Reply::Logs { lines, end, .. }) => {
                failing = false;
                if !lines.is_empty() && !send(&tx, html! { @for l in &lines { (line(l)) } }) {
                    return;
                }
                match end {
                    Some(e) => from = Some(e),
                    None => {
                        send(&tx, note(format!("host `{host}` cannot follow logs")));
                        return;
                    }
                }
            }
            Ok(other) => {
                send(&tx, note(format!("host `{host}` answered {other:?}")));
                return;
            }
            Err(e) => {
                if !failing && !send(&tx, note(format!("cannot read the log now: {e}"))) {
                    return;
                }
                failing = true;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = tx.closed() => return,
        }
        if checked.elapsed() > Duration::from_secs(15) {
            if !still_valid(&state, &session).await {
                return;
            }
            checked = tokio::time::Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_and_binary_lines_read_as_escaped_text() {
        let long = format!(
            "2026-01-01T00:00:00.000Z stdout F {}",
            "x".repeat(MAX_LINE + 10)
        );
        let shown = line(&long).into_string();
        assert!(shown.contains("10 more bytes not shown"), "{shown}");
        assert!(!shown.contains("stdout F"), "the stamp is taken off");
        let odd = line("\u{1b}[31m<script>alert(1)</script>\u{0}").into_string();
        assert!(
            !odd.contains("<script>") && odd.contains("&lt;script&gt;"),
            "{odd}"
        );
        assert!(!odd.contains('\u{1b}') && odd.contains("^[[31m"), "{odd}");
    }
}
