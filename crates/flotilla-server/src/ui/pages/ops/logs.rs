//! A component's log on its page, following live: a [`Tail`] of the page's event
//! stream sends its new lines (event `log`, HTML appended to the log box), read
//! through the component's agent exactly as `flotilla logs -f` reads it
//! (`Call::Logs` with `from` = the end of the last answer), every [`POLL`]. The
//! first batch starts with a `data-log-start` mark: a stream that resumes starts
//! its tail afresh, and the page drops what came before the mark. Lines are shown
//! as text: control characters visible, a line longer than [`MAX_LINE`] characters
//! cut with how much was left out. Bounded: a client that does not read fills the
//! stream's buffer and is dropped.

use super::super::super::extract::still_valid;
use super::super::super::layout;
use super::super::super::live::Tail;
use crate::state::AppState;
use axum::response::sse::Event;
use flotilla_exec::remote::{Call, Reply};
use flotilla_model::inventory::TransportKind;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the agent is asked for new lines.
pub const POLL: Duration = Duration::from_secs(1);
/// Lines shown when the page opens.
pub const FIRST_LINES: usize = 200;
/// A longer line is cut to this many characters.
pub const MAX_LINE: usize = 2000;
/// Time allowed for the agent to answer one read.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The log box of component `name`, connected to its stream, with its
/// following/paused state.
pub(crate) fn pane(name: &str, server: &str) -> Markup {
    html! {
        section.logs aria-labelledby="log-title" {
            div.log-head {
                h2 #log-title { "Log" }
                span.log-state data-log-state role="status" { "following" }
                button type="button" data-log-follow hidden { "Follow the end" }
            }
            pre.log #log data-follow tabindex="0" aria-labelledby="log-title" sse-swap="log" hx-swap="beforeend" {}
            p.muted { "Scroll up to pause following; scroll back to the end (or press the button) to follow again. The page keeps the last 5,000 lines." }
            (layout::command(&crate::controller::command::with_server(&format!("flotilla logs -f {}", shlex::try_quote(name).map(|s| s.into_owned()).unwrap_or_default()), server)))
        }
    }
}

/// One record as shown: its text (the stamped log format's prefix taken off), cut
/// at [`MAX_LINE`] characters, and the end of its line — except after a piece of a
/// line (`P`: written without its newline yet), which the next record continues.
fn line(raw: &str) -> Markup {
    let stamped = flotilla_exec::logs::parse_stamped(raw);
    let piece = stamped.as_ref().is_some_and(|s| s.partial);
    let text = stamped.map_or(raw, |s| s.text);
    let (shown, left) = match text.char_indices().nth(MAX_LINE) {
        Some((at, _)) => (&text[..at], text.len() - at),
        None => (text, 0),
    };
    html! {
        span.line { (layout::visible(shown))
            @if left > 0 { span.cut { " … (" (left) " more bytes not shown)" } }
        } @if !piece { "\n" }
    }
}

/// The tail following component `name`'s log.
pub(crate) fn tail<S: AuthorityStore>(name: String) -> Tail<S> {
    Tail::new(move |state, session, tx| follow(state, session, name.clone(), tx))
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
                let start = from.is_none();
                if (start || !lines.is_empty())
                    && !send(
                        &tx,
                        html! { @if start { span data-log-start {} } @for l in &lines { (line(l)) } },
                    )
                {
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
        // A line written in pieces reads as one line.
        let pieces: String = [
            "2026-01-01T00:00:00.000Z stdout P line",
            "2026-01-01T00:00:00.001Z stdout P  27",
            "2026-01-01T00:00:00.002Z stdout F  xx",
        ]
        .iter()
        .map(|r| line(r).into_string())
        .collect();
        assert_eq!(
            pieces,
            "<span class=\"line\">line</span><span class=\"line\"> 27</span><span class=\"line\"> xx</span>\n"
        );
        let odd = line("\u{1b}[31m<script>alert(1)</script>\u{0}").into_string();
        assert!(
            !odd.contains("<script>") && odd.contains("&lt;script&gt;"),
            "{odd}"
        );
        assert!(!odd.contains('\u{1b}') && odd.contains("^[[31m"), "{odd}");
    }
}
