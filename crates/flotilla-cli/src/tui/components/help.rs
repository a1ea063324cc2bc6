//! The help overlay (`?`): every key, and what it does.

use crate::tui::components::frame::{block, header_style, hint_style, popup};
use crate::tui::model::App;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;

/// Every key of the main screen, and what it does.
pub const KEYS: &[(&str, &str)] = &[
    ("↑ ↓ / k j", "move the cursor (PgUp PgDn, g/Home, G/End)"),
    ("/", "filter: type to filter, Enter keeps it, Esc clears it"),
    (
        "space",
        "mark a component: the log pane follows every marked one",
    ),
    (
        "s",
        "start the selected component: shows the plan, asks y/n",
    ),
    ("x", "stop it: shows the plan (refusals too), asks y/n"),
    ("r", "restart it: shows the plan, asks y/n"),
    ("y / n", "in a plan: apply exactly that plan / do nothing"),
    (
        "e",
        "the evidence of every status signal of the selected row",
    ),
    ("d", "its dependencies and dependents (from the topology)"),
    ("l", "its log, full screen (scroll back; End follows again)"),
    ("R", "observe again now"),
    ("Tab", "--server: move between components and questions"),
    (
        "a / n",
        "questions: answer allow / deny, with a note (Tab switches, Enter sends)",
    ),
    ("Esc", "close what is open; clear the filter and marks"),
    ("?", "this help"),
    (
        "q, Ctrl-C",
        "quit (while an operation runs: cancel it first)",
    ),
];

/// Draws the help over `area`.
pub fn render(_app: &App, frame: &mut Frame, area: Rect) {
    let area = popup(area, 80, 80);
    let width = KEYS
        .iter()
        .map(|(k, _)| k.chars().count())
        .max()
        .unwrap_or(0);
    let mut lines: Vec<Line> = vec![Line::from(Span::styled(
        "Every action shows its plan and its command line before anything changes.",
        header_style(),
    ))];
    lines.push(Line::from(""));
    lines.extend(KEYS.iter().map(|(k, what)| {
        Line::from(vec![
            Span::styled(format!("{k:<width$}  "), hint_style()),
            Span::raw(*what),
        ])
    }));
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled("Esc, ? or q closes", hint_style())));
    frame.render_widget(Clear, area);
    frame.render_widget(Paragraph::new(lines).block(block("keys")), area);
}
