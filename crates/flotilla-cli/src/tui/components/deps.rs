//! The dependency view (`d`): the selected component's dependencies (what it needs,
//! transitively) and dependents (what needs it), each with its status now.

use crate::tui::components::frame::{block, header_style, hint_style, popup, safe};
use crate::tui::model::{App, Graph, Overlay};
use flotilla_exec::observe::value_name as name;
use flotilla_model::status::StatusReport;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Clear, Paragraph};
use ratatui::Frame;
use std::collections::BTreeMap;

/// Draws the dependency view of the selected component over `area`.
pub fn render(app: &App, frame: &mut Frame, area: Rect) {
    let (Overlay::Dependencies { scroll }, Some(c), Some(graph), Some(s)) = (
        &app.overlay,
        app.selected(),
        app.graph.as_ref(),
        app.snapshot.as_ref(),
    ) else {
        return;
    };
    let mut lines = vec![Line::from(format!(
        "{} {}",
        safe(&c.name),
        state(&s.report, &c.name)
    ))];
    let sections = [
        (
            "depends on (started before it, stopped after it):",
            &graph.upstream,
        ),
        (
            "depended on by (a stop is refused while they run, unless --cascade/--force):",
            &graph.downstream,
        ),
    ];
    for (title, edges) in sections {
        lines.push(Line::from(""));
        lines.push(Line::from(Span::styled(title, header_style())));
        tree(edges, &s.report, &c.name, 1, &mut Vec::new(), &mut lines);
    }
    lines.push(Line::from(""));
    lines.push(Line::from(Span::styled(
        "the same in the CLI: flotilla topology · ↑/↓ scroll · d/Esc closes",
        hint_style(),
    )));
    let area = popup(area, 80, 80);
    frame.render_widget(Clear, area);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block(&format!("dependencies: {}", c.name)))
            .scroll((*scroll, 0)),
        area,
    );
}

/// `running, healthy` of `name` in the report (`not observed` when absent).
fn state(report: &StatusReport, name_: &str) -> String {
    report
        .components
        .iter()
        .find(|c| c.name == name_)
        .map_or("(not observed)".into(), |c| {
            format!(
                "({}, {}, {})",
                name(&c.lifecycle),
                name(&c.health),
                c.condition.as_str()
            )
        })
}

/// The edges of `from` in `edges`, indented by `depth`, recursively (a name on the
/// current path is not followed again).
fn tree(
    edges: &BTreeMap<String, Vec<String>>,
    report: &StatusReport,
    from: &str,
    depth: usize,
    path: &mut Vec<String>,
    out: &mut Vec<Line<'static>>,
) {
    let next = edges.get(from).map(Vec::as_slice).unwrap_or_default();
    if next.is_empty() && depth == 1 {
        out.push(Line::from("  nothing"));
    }
    path.push(from.to_string());
    for n in next {
        out.push(Line::from(format!(
            "{}└ {} {}",
            "  ".repeat(depth),
            safe(n),
            state(report, n)
        )));
        if !path.contains(n) {
            tree(edges, report, n, depth + 1, path, out);
        }
    }
    path.pop();
}

/// The graph of `topology`, by name.
pub fn graph(topology: &flotilla_model::Topology) -> Graph {
    let names = |ids: &[flotilla_model::ComponentId]| -> Vec<String> {
        ids.iter()
            .map(|&i| topology.component(i).name.clone())
            .collect()
    };
    let mut g = Graph::default();
    for &id in topology.order() {
        let n = topology.component(id).name.clone();
        g.upstream.insert(n.clone(), names(topology.upstream(id)));
        g.downstream.insert(n, names(topology.downstream(id)));
    }
    g
}
