//! The log pane: the followed components' lines, newest at the bottom, following the
//! end unless scrolled back (then it says how many lines arrived meanwhile). Below
//! the table, or full screen (`l`).

use crate::tui::components::frame::{block, hint_style};
use crate::tui::model::App;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

/// Draws the log pane in `area`; `full` when it covers the screen.
pub fn render(app: &App, frame: &mut Frame, area: Rect, full: bool) {
    let logs = &app.logs;
    let mut title = if logs.following.is_empty() {
        "logs".to_string()
    } else {
        format!("logs: {}", logs.following.join(", "))
    };
    if logs.back > 0 {
        title.push_str(&format!(
            " (scrolled back; {} new line{}; End follows)",
            logs.unseen,
            if logs.unseen == 1 { "" } else { "s" }
        ));
    } else if !logs.following.is_empty() {
        title.push_str(" (following)");
    }
    let b = block(&title);
    let inner = b.inner(area);
    let height = inner.height as usize;
    let mut text: Vec<Line> = Vec::new();
    if let Some(e) = &logs.error {
        text.push(Line::from(Span::styled(
            format!("cannot read: {e}"),
            hint_style(),
        )));
    }
    if logs.lines.is_empty() && logs.error.is_none() {
        let why = if logs.following.is_empty() {
            "no component selected"
        } else {
            "no lines yet (nothing written, or never started here)"
        };
        text.push(Line::from(Span::styled(why, hint_style())));
    }
    let room = height.saturating_sub(text.len() + usize::from(full));
    let end = logs.lines.len().saturating_sub(logs.back);
    let start = end.saturating_sub(room);
    text.extend(logs.lines.range(start..end).map(|l| Line::from(l.as_str())));
    if full {
        text.push(Line::from(Span::styled(
            "↑/k ↓/j PgUp PgDn scroll · g top · G/End follow · l/Esc back",
            hint_style(),
        )));
    }
    frame.render_widget(Paragraph::new(text).block(b), area);
}
