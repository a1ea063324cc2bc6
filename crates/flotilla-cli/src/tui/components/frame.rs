//! What the components share: a centred popup's area, a bordered block, styles for
//! status values, and text made safe for the terminal.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, BorderType};

/// A popup `w`% wide and `h`% high, centred in `area` (at least 40×8, at most `area`).
pub fn popup(area: Rect, w: u16, h: u16) -> Rect {
    let width = (area.width * w / 100).max(40).min(area.width);
    let height = (area.height * h / 100).max(8).min(area.height);
    Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    }
}

/// A bordered block titled `title` (made printable).
pub fn block(title: &str) -> Block<'static> {
    Block::bordered()
        .border_type(BorderType::Plain)
        .title(format!(" {} ", safe(title)))
}

/// `s` safe to draw: control characters and terminal escapes shown escaped
/// (`\u{1b}`), never written raw ([`crate::render::printable`]).
pub fn safe(s: &str) -> String {
    crate::render::printable(s, false)
}

/// Whether to colour: not when `NO_COLOR` is set (<https://no-color.org>).
fn colour() -> bool {
    static COLOUR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *COLOUR.get_or_init(|| std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()))
}

/// The style of a status value: green when good, yellow when in between, red when
/// bad (the word itself is always shown: colour only repeats it).
pub fn value_style(value: &str) -> Style {
    if !colour() {
        return Style::new();
    }
    match value {
        "running" | "healthy" | "ok" | "observed" => Style::new().fg(Color::Green),
        "starting" | "stopping" | "degraded" | "drift" | "stale-runtime" | "attention"
        | "unknown" => Style::new().fg(Color::Yellow),
        "failed" | "unhealthy" | "down-unexpectedly" | "error" | "unreachable" => {
            Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
        }
        _ => Style::new(),
    }
}

/// The style of headers.
pub fn header_style() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// The style of hints (keys in the footer and dialogs).
pub fn hint_style() -> Style {
    if !colour() {
        return Style::new();
    }
    Style::new().fg(Color::Cyan)
}

/// The style of errors and refusals.
pub fn error_style() -> Style {
    if !colour() {
        return Style::new();
    }
    Style::new().fg(Color::Red)
}

/// A table's cursor: a `> ` before the selected row, shown reversed, when the table
/// has the focus; nothing otherwise.
pub fn cursor(table: ratatui::widgets::Table<'_>, focused: bool) -> ratatui::widgets::Table<'_> {
    if focused {
        table
            .highlight_symbol("> ")
            .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
    } else {
        table.highlight_symbol("  ")
    }
}
