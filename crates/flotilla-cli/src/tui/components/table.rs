//! The component table: host, component, lifecycle, health, condition, pid,
//! restarts, age (uptime) and the measured runtime digest, one row per component
//! the filter lets through; columns are dropped from the right on a narrow terminal.

use crate::tui::components::frame::{block, cursor, header_style, safe, value_style};
use crate::tui::model::{App, Focus};
use flotilla_exec::observe::{age, value_name as name};
use flotilla_model::status::ComponentStatus;
use flotilla_model::Lifecycle;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Paragraph, Row, Table, TableState};
use ratatui::Frame;

/// A column: its header, its width, and its cell.
struct Column {
    header: &'static str,
    width: u16,
    cell: fn(&ComponentStatus, i64) -> String,
}

/// The columns, in order; on a narrow terminal those with the lowest `keep` rank go first.
const COLUMNS: &[(Column, u8)] = &[
    (
        Column {
            header: "HOST",
            width: 10,
            cell: |c, _| c.host.clone(),
        },
        3,
    ),
    (
        Column {
            header: "COMPONENT",
            width: 14,
            cell: |c, _| c.name.clone(),
        },
        9,
    ),
    (
        Column {
            header: "LIFECYCLE",
            width: 9,
            // An unreachable host's component: its last known lifecycle, in
            // parentheses (the evidence pane says when it was seen).
            cell: |c, _| match &c.last_known {
                Some(l) => format!("({})", name(&l.lifecycle)),
                None => name(&c.lifecycle),
            },
        },
        8,
    ),
    (
        Column {
            header: "HEALTH",
            width: 9,
            cell: |c, _| name(&c.health),
        },
        7,
    ),
    (
        Column {
            header: "CONDITION",
            width: 17,
            cell: |c, _| c.condition.as_str().to_string(),
        },
        6,
    ),
    (
        Column {
            header: "PID",
            width: 7,
            cell: |c, _| live(c).map_or("-".into(), |i| i.measured.pid.to_string()),
        },
        5,
    ),
    (
        Column {
            header: "RESTARTS",
            width: 8,
            cell: |c, _| c.restarts.map_or("-".into(), |n| n.to_string()),
        },
        2,
    ),
    (
        Column {
            header: "AGE",
            width: 8,
            cell: |c, now| live(c).map_or("-".into(), |i| age(now - i.started_at_ms)),
        },
        4,
    ),
    (
        Column {
            header: "RUNTIME",
            width: 19,
            cell: |c, _| {
                c.runtime_identity
                    .as_ref()
                    .map_or("-".into(), crate::cmd::status::runtime_column)
            },
        },
        1,
    ),
];

/// The runtime identity of a component whose process is there (also while it
/// starts or stops).
fn live(c: &ComponentStatus) -> Option<&flotilla_model::status::RuntimeStatus> {
    matches!(
        c.lifecycle,
        Lifecycle::Running | Lifecycle::Starting | Lifecycle::Stopping
    )
    .then_some(c.runtime_identity.as_ref())
    .flatten()
}

/// The columns that fit in `width` (the borders, the cursor, the mark column, one
/// space between columns).
fn fitting(width: u16) -> Vec<&'static Column> {
    let mut keep: Vec<usize> = (0..COLUMNS.len()).collect();
    let total = |k: &[usize]| -> u16 { 5 + k.iter().map(|&i| COLUMNS[i].0.width + 1).sum::<u16>() };
    while total(&keep) > width && keep.len() > 2 {
        let drop = *keep
            .iter()
            .min_by_key(|&&i| COLUMNS[i].1)
            .expect("columns left");
        keep.retain(|&i| i != drop);
    }
    keep.into_iter().map(|i| &COLUMNS[i].0).collect()
}

/// Draws the table in `area`.
pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let visible = app.visible();
    let total = app
        .snapshot
        .as_ref()
        .map_or(0, |s| s.report.components.len());
    let not_ok = visible.iter().filter(|c| !c.is_ok()).count();
    let mut title = format!("components ({} of {total}", visible.len());
    if not_ok > 0 {
        title.push_str(&format!(", {not_ok} not as desired or healthy"));
    }
    title.push(')');
    if !app.filter.is_empty() {
        title.push_str(&format!(" filter: {}", app.filter));
    }
    let b = block(&title);
    if app.snapshot.is_none() {
        let text = app.error.as_deref().map_or("observing…".to_string(), |e| {
            format!("cannot observe: {}", safe(e))
        });
        frame.render_widget(Paragraph::new(text).block(b), area);
        return;
    }
    let columns = fitting(area.width);
    let now = app.snapshot.as_ref().map_or(0, |s| s.report.observed_at_ms);
    let header = Row::new(
        std::iter::once(Cell::from(" ")).chain(columns.iter().map(|c| Cell::from(c.header))),
    )
    .style(header_style());
    // Only the rows the table has room for are built (the cursor's window), so a
    // key costs the same with 200 components as with 20.
    let room = area.height.saturating_sub(3).max(1) as usize;
    let offset = app.cursor.saturating_sub(room - 1);
    let rows = visible.iter().skip(offset).take(room).map(|c| {
        let mark = if app.marked.contains(&c.name) {
            "*"
        } else {
            " "
        };
        Row::new(
            std::iter::once(Cell::from(mark)).chain(columns.iter().map(|col| {
                let text = safe(&(col.cell)(c, now));
                let style = value_style(&text);
                Cell::from(Line::from(Span::styled(text, style)))
            })),
        )
    });
    // The last column takes what is left (a runtime digest with its release).
    let last = columns.len() - 1;
    let widths =
        std::iter::once(Constraint::Length(1)).chain(columns.iter().enumerate().map(|(i, c)| {
            if i == last {
                Constraint::Fill(1)
            } else {
                Constraint::Length(c.width)
            }
        }));
    let focused = app.focus == Focus::Components;
    let table = Table::new(rows, widths)
        .header(header)
        .block(b)
        .column_spacing(1);
    let mut state =
        TableState::default().with_selected((!visible.is_empty()).then_some(app.cursor - offset));
    frame.render_stateful_widget(cursor(table, focused), area, &mut state);
}
