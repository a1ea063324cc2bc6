//! The questions pane (`--server`): the authority's open questions, each with its
//! tool, reason and exact input shown as text — terminal escapes in what an agent
//! wrote are shown escaped, never written raw — and the answer dialog (allow/deny
//! with a note) with its equivalent command line.

use crate::tui::components::frame::{block, cursor, header_style, hint_style, popup, safe};
use crate::tui::model::{AnswerDialog, App, Focus, Overlay};
use flotilla_api::sessions::QuestionDto;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, Clear, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;

/// What a question's input is, in one line: its `command` when it has one, else its
/// JSON.
pub fn input_line(q: &QuestionDto) -> String {
    match q.doc.tool_input.get("command").and_then(|c| c.as_str()) {
        Some(c) => c.to_string(),
        None => q.doc.tool_input.to_string(),
    }
}

/// Draws the questions pane in `area`.
pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let Some(questions) = &app.questions else {
        return;
    };
    let focused = app.focus == Focus::Questions;
    let title = format!(
        "questions ({} open){}",
        questions.len(),
        if focused {
            " · a allow · n deny · Tab back"
        } else {
            " · Tab to answer"
        }
    );
    let rows = questions.iter().map(|q| {
        Row::new([
            Cell::from(q.id.to_string()),
            Cell::from(q.session.to_string()),
            Cell::from(safe(&q.doc.tool_name)),
            Cell::from(safe(&q.doc.reason)),
            Cell::from(safe(&input_line(q))),
        ])
    });
    let table = Table::new(
        rows,
        [
            Constraint::Length(4),
            Constraint::Length(7),
            Constraint::Length(9),
            Constraint::Percentage(35),
            Constraint::Fill(1),
        ],
    )
    .header(Row::new(["ID", "SESSION", "TOOL", "REASON", "INPUT"]).style(header_style()))
    .block(block(&title));
    let mut state =
        TableState::default().with_selected((!questions.is_empty()).then_some(app.question_cursor));
    frame.render_stateful_widget(cursor(table, focused), area, &mut state);
}

/// The equivalent command line of an answer.
pub fn answer_command(d: &AnswerDialog) -> String {
    let mut line = format!("flotilla question answer {} {}", d.id, d.decision);
    let note = d.note.trim();
    if !note.is_empty() {
        let quoted =
            shlex::try_quote(note).map_or_else(|_| format!("{note:?}"), |q| q.into_owned());
        line.push_str(&format!(" --note {quoted}"));
    }
    line
}

/// Draws the answer dialog over `area`.
pub fn render_answer(app: &App, frame: &mut Frame, area: Rect) {
    let Overlay::Answer(d) = &app.overlay else {
        return;
    };
    let q = app
        .questions
        .as_ref()
        .and_then(|qs| qs.iter().find(|q| q.id == d.id));
    let mut lines: Vec<Line> = Vec::new();
    if let Some(q) = q {
        lines.push(Line::from(format!(
            "session {} asks to run {}",
            q.session,
            safe(&q.doc.tool_name)
        )));
        lines.push(Line::from(format!("reason: {}", safe(&q.doc.reason))));
        lines.push(Line::from(Span::styled("input, exactly:", header_style())));
        let pretty = serde_json::to_string_pretty(&q.doc.tool_input).unwrap_or_default();
        lines.extend(pretty.lines().map(|l| Line::from(format!("  {}", safe(l)))));
        if let Some(c) = q.doc.tool_input.get("command").and_then(|c| c.as_str()) {
            lines.push(Line::from(Span::styled(
                "command, as text:",
                header_style(),
            )));
            lines.push(Line::from(format!("  {}", safe(c))));
        }
        lines.push(Line::from(""));
    }
    lines.push(Line::from(vec![
        Span::styled("answer: ", header_style()),
        Span::raw(d.decision),
        Span::styled("  (Tab switches allow/deny)", hint_style()),
    ]));
    lines.push(Line::from(vec![
        Span::styled("note: ", header_style()),
        Span::raw(safe(&d.note)),
        Span::raw(if d.result.is_none() { "▏" } else { "" }),
    ]));
    lines.push(Line::from(vec![
        Span::styled("equivalent command: ", header_style()),
        Span::raw(safe(&answer_command(d))),
    ]));
    lines.push(Line::from(""));
    match &d.result {
        None => lines.push(Line::from(Span::styled(
            "Enter sends this answer for that one call · Esc cancels",
            hint_style(),
        ))),
        Some(Ok(t)) => {
            lines.push(Line::from(safe(t)));
            lines.push(Line::from(Span::styled("Esc closes", hint_style())));
        }
        Some(Err(e)) => {
            lines.push(Line::from(format!("error: {}", safe(e))));
            lines.push(Line::from(Span::styled("Esc closes", hint_style())));
        }
    }
    let area = popup(area, 90, 80);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block(&format!("question {}", d.id)))
            .wrap(Wrap { trim: false }),
        area,
    );
}
