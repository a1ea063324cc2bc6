//! The plan dialog (`s`/`x`/`r`): the plan as the CLI prints it (waves, impact,
//! cleanup) or the planner's refusal, the equivalent command line, and the question
//! y/n; then the progress of applying exactly that plan, and how it ended.

use crate::tui::components::frame::{block, error_style, header_style, hint_style, popup, safe};
use crate::tui::model::{App, Overlay, PlanState};
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Draws the plan dialog over `area` (nothing when none is open).
pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let Overlay::Plan(d) = &app.overlay else {
        return;
    };
    // The command as a terminal would run it: through the authority in `--server`
    // mode.
    let command = match &app.mode {
        crate::tui::model::Mode::Server { url, .. } => {
            d.op.to_string()
                .replacen("flotilla ", &format!("flotilla --server {url} "), 1)
        }
        crate::tui::model::Mode::Local { .. } => d.op.to_string(),
    };
    let mut lines: Vec<Line> = Vec::new();
    let text_lines =
        |text: &str| -> Vec<Line<'static>> { text.lines().map(|l| Line::from(safe(l))).collect() };
    let hint = |s: &str| Line::from(Span::styled(s.to_string(), hint_style()));
    match &d.state {
        PlanState::Planning => {
            lines.push(Line::from(format!(
                "planning (a dry run, as `{command} --dry-run`) …"
            )));
        }
        PlanState::Ready(plan) => {
            lines.extend(text_lines(&crate::render::plan(plan)));
            lines.push(Line::from(""));
            lines.push(Line::from(vec![
                Span::styled("equivalent command: ", header_style()),
                Span::raw(command.clone()),
            ]));
            lines.push(Line::from(""));
            lines.push(Line::from(Span::styled(
                "Apply exactly this plan? y: yes · n/Esc: no",
                header_style(),
            )));
        }
        PlanState::Refused(text) => {
            lines.extend(
                text.lines()
                    .map(|l| Line::from(Span::styled(safe(l), error_style()))),
            );
            lines.push(Line::from(""));
            lines.push(Line::from(vec![
                Span::styled("equivalent command: ", header_style()),
                Span::raw(command.clone()),
            ]));
            lines.push(hint("nothing was changed · Esc closes"));
        }
        PlanState::Applying(progress) => {
            lines.push(Line::from(format!("applying: {command}")));
            lines.extend(progress.iter().map(|l| Line::from(safe(l))));
            lines.push(hint("Esc hides this (it goes on) · Ctrl-C/q cancels it"));
        }
        PlanState::Done { lines: done, ok } => {
            lines.push(Line::from(format!("applied: {command}")));
            let style = if *ok { Style::new() } else { error_style() };
            lines.extend(
                done.iter()
                    .map(|l| Line::from(Span::styled(safe(l), style))),
            );
            lines.push(hint("Esc closes"));
        }
        PlanState::Failed(e) => {
            lines.extend(
                e.lines()
                    .map(|l| Line::from(Span::styled(safe(l), error_style()))),
            );
            lines.push(hint("nothing was applied · Esc closes"));
        }
    }
    let area = popup(area, 90, 80);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block(&format!("plan: {command}")))
            .wrap(Wrap { trim: false })
            .scroll((d.scroll, 0)),
        area,
    );
}
