//! The screen, component by component: a header, the component table, the questions
//! pane (`--server`), the log pane and a footer; over them at most one overlay (help,
//! plan, evidence, dependencies, full-screen logs, an answer). Each component draws
//! from the [`App`] alone.

pub mod deps;
pub mod evidence;
pub mod frame;
pub mod help;
pub mod logs;
pub mod plan;
pub mod questions;
pub mod table;

use crate::tui::model::{App, Mode, Overlay};
use frame::{hint_style, safe};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// The footer's key hints.
const HINTS: &str =
    "? help · / filter · s start · x stop · r restart · e evidence · d deps · l logs · q quit";
/// The footer's key hints on a narrow terminal.
const SHORT_HINTS: &str = "? help · / filter · s/x/r start/stop/restart · q quit";

/// Draws the whole screen.
pub fn draw(app: &App, frame: &mut Frame) {
    let area = frame.area();
    if app.overlay == Overlay::Logs {
        let [body, foot] =
            Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(area);
        logs::render(app, frame, body, true);
        footer(app, frame, foot);
        return;
    }
    let notes = app.snapshot.as_ref().map_or(0, |s| s.notes.len().min(3)) as u16;
    let questions = match &app.questions {
        Some(q) => (q.len() as u16 + 3).clamp(4, 8),
        None => 0,
    };
    let [head, table_area, questions_area, logs_area, foot] = Layout::vertical([
        Constraint::Length(1 + notes),
        Constraint::Fill(3),
        Constraint::Length(questions),
        Constraint::Fill(2),
        Constraint::Length(1),
    ])
    .areas(area);
    header(app, frame, head);
    table::render(app, frame, table_area);
    if app.questions.is_some() {
        questions::render(app, frame, questions_area);
    }
    logs::render(app, frame, logs_area, false);
    footer(app, frame, foot);
    match &app.overlay {
        Overlay::None | Overlay::Logs => {}
        Overlay::Help => help::render(app, frame, area),
        Overlay::Plan(_) => plan::render(app, frame, area),
        Overlay::Evidence { .. } => evidence::render(app, frame, area),
        Overlay::Dependencies { .. } => deps::render(app, frame, area),
        Overlay::Answer(_) => questions::render_answer(app, frame, area),
    }
}

/// `flotilla tui · local project demo · observed 14:03:07 UTC`, and the authority's
/// notes (its selected revision, hosts).
fn header(app: &App, frame: &mut Frame, area: Rect) {
    let source = match &app.mode {
        Mode::Local { project } => format!("{project} (this machine)"),
        Mode::Server { url } => format!("authority {url}"),
    };
    let observed = app.snapshot.as_ref().map_or("observing…".to_string(), |s| {
        format!(
            "observed {} UTC",
            crate::cmd::status::utc_time_of_day(s.report.observed_at_ms)
        )
    });
    let mut lines = vec![Line::from(vec![
        Span::styled("flotilla tui", frame::header_style()),
        Span::raw(format!(" · {} · {observed}", safe(&source))),
    ])];
    if let Some(e) = &app.error {
        lines[0].push_span(Span::styled(
            format!(" · cannot observe: {}", safe(e)),
            frame::error_style(),
        ));
    }
    if let Some(s) = &app.snapshot {
        lines.extend(s.notes.iter().take(3).map(|n| Line::from(safe(n))));
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The filter being typed, else the last message, else the key hints.
fn footer(app: &App, frame: &mut Frame, area: Rect) {
    let line = if app.editing_filter {
        Line::from(vec![
            Span::styled("/", hint_style()),
            Span::raw(safe(&app.filter)),
            Span::raw("▏"),
            Span::styled("  Enter keeps · Esc clears", hint_style()),
        ])
    } else if let Some(m) = &app.message {
        Line::from(vec![
            Span::raw(safe(m)),
            Span::styled("  (? help)", hint_style()),
        ])
    } else {
        let hints = if area.width as usize >= HINTS.chars().count() {
            HINTS
        } else {
            SHORT_HINTS
        };
        Line::from(Span::styled(hints, hint_style()))
    };
    frame.render_widget(Paragraph::new(line), area);
}
