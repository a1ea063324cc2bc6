//! The evidence view (`e`): every status signal of the selected row with its
//! evidence — which source, when, what was seen — and its identities.

use crate::tui::components::frame::{block, header_style, hint_style, popup, safe};
use crate::tui::model::{App, Overlay};
use flotilla_exec::observe::{age, value_name as name};
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph, Wrap};
use ratatui::Frame;

/// Draws the evidence of the selected component over `area`.
pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let (Overlay::Evidence { scroll }, Some(c), Some(s)) =
        (&app.overlay, app.selected(), app.snapshot.as_ref())
    else {
        return;
    };
    let now = s.report.observed_at_ms;
    let time = crate::cmd::status::utc_time_of_day;
    let mut lines: Vec<Line> = vec![
        Line::from(format!(
            "lifecycle {} (desired {}) · health {} · condition {} · {}",
            name(&c.lifecycle),
            c.desired.as_ref().map_or("-".into(), name),
            name(&c.health),
            c.condition.as_str(),
            crate::cmd::status::seen(c, now),
        )),
        Line::from(format!(
            "owner {} · started by {}",
            c.ownership,
            safe(&started_by(&c.started_by))
        )),
        Line::from(format!(
            "config identity: selected {} · running {}",
            crate::render::short_digest(&c.config_identity.selected),
            c.config_identity
                .running
                .as_deref()
                .map_or("-".into(), crate::render::short_digest)
        )),
    ];
    if let Some(rt) = &c.runtime_identity {
        lines.push(Line::from(format!(
            "runtime identity: pid {} · {} · {} · started {} UTC ({} ago) by {}",
            rt.measured.pid,
            safe(&rt.measured.exe.display().to_string()),
            crate::cmd::status::runtime_column(rt),
            time(rt.started_at_ms),
            age(now - rt.started_at_ms),
            safe(&rt.started_by_operation)
        )));
    }
    for change in &c.config_changes {
        lines.push(Line::from(format!(
            "changed since it started: {}",
            safe(change)
        )));
    }
    if let Some(e) = &c.owner_error {
        lines.push(Line::from(format!("owner could not be asked: {}", safe(e))));
    }
    lines.push(Line::from(""));
    let mut rows = vec![vec![
        "SIGNAL".to_string(),
        "SOURCE".into(),
        "AT (UTC)".into(),
        "SAW".into(),
    ]];
    for e in &c.evidence {
        rows.push(vec![
            name(&e.signal),
            safe(&e.source),
            format!("{} ({} ago)", time(e.at_ms), age(now - e.at_ms)),
            safe(&e.saw),
        ]);
    }
    let table = crate::render::table(&rows);
    for (i, l) in table.lines().enumerate() {
        if i == 0 {
            lines.push(Line::from(Span::styled(l.to_string(), header_style())));
        } else {
            lines.push(Line::from(l.to_string()));
        }
    }
    if c.evidence.is_empty() {
        lines.push(Line::from("no evidence recorded"));
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        format!(
            "the same in the CLI: flotilla status {} -v · ↑/↓ scroll · e/Esc closes",
            c.name
        ),
        hint_style(),
    )));
    let area = popup(area, 96, 85);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block(&format!("evidence: {} on {}", c.name, c.host)))
            .wrap(Wrap { trim: false })
            .scroll((*scroll, 0)),
        area,
    );
}

/// Who started the running instance, in words.
fn started_by(s: &flotilla_model::status::StartedBy) -> String {
    use flotilla_model::status::StartedBy;
    match s {
        StartedBy::Nobody => "nobody".into(),
        StartedBy::Flotilla { operation } => format!("flotilla ({operation})"),
        StartedBy::Foreign { evidence } => format!("something else: {evidence}"),
    }
}
