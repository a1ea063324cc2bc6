//! A plan and a refusal as the lines a person reads, shared by every face: the CLI
//! prints [`PlanLines::text`], the dashboard lays the same lines out as HTML, the
//! terminal UI shows them in a pane. Pure: text in, text out.

use crate::{Plan, Refusal};
use flotilla_model::inventory::Owner;

/// Formats rows as left-aligned columns separated by two spaces (trailing spaces
/// trimmed), one `\n`-terminated line per row. Widths count `char`s.
pub fn table(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < r.len() {
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// One step's line, aligned with every other step of its plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLine {
    /// The step's action (`start`, `no-op`…), for a face that marks actions.
    pub action: crate::Action,
    /// The component.
    pub component: String,
    /// The line, e.g. `  start  llm  on studio  process  dependency of chat`.
    pub text: String,
}

/// One wave: its title (`wave 1`) and its steps' lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaveLines {
    /// `wave N`, from 1.
    pub title: String,
    /// Its steps.
    pub steps: Vec<StepLine>,
}

/// A plan as lines, in the order the CLI prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanLines {
    /// `plan: flotilla start chat`.
    pub title: String,
    /// `  topology sha256:…  observed sha256:…` (19 characters of each digest).
    pub digests: String,
    /// `  nothing to do: …` when no step changes a process.
    pub nothing_to_do: Option<String>,
    /// The waves.
    pub waves: Vec<WaveLines>,
    /// `then: check stack …'s readiness probes …` for a stack with route probes.
    pub then: Option<String>,
    /// `  component  effect` lines of what the plan affects without operating on it.
    pub impact: Vec<String>,
    /// `if it fails part-way: stop …` when the plan starts anything.
    pub cleanup: Option<String>,
}

impl PlanLines {
    /// The lines of `p`.
    pub fn of(p: &Plan) -> PlanLines {
        let short = |d: &str| d.get(..19).unwrap_or(d).to_string();
        // One table for all waves so columns line up across them.
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut place = Vec::new();
        for (i, w) in p.waves.iter().enumerate() {
            for s in &w.steps {
                let owner = match (s.owner, s.adapter) {
                    (Owner::External, _) => "external".to_string(),
                    (_, Some(a)) => a.as_str().to_string(),
                    _ => "managed".to_string(),
                };
                rows.push(vec![
                    format!("  {}", s.action.as_str()),
                    s.component.clone(),
                    format!("on {}", s.host),
                    owner,
                    s.reason.clone(),
                ]);
                place.push((i, s.action, s.component.clone()));
            }
        }
        let text = table(&rows);
        let mut waves: Vec<WaveLines> = Vec::new();
        for (line, (wave, action, component)) in text.lines().zip(place) {
            let title = format!("wave {}", wave + 1);
            if waves.last().is_none_or(|w| w.title != title) {
                waves.push(WaveLines {
                    title,
                    steps: Vec::new(),
                });
            }
            if let Some(w) = waves.last_mut() {
                w.steps.push(StepLine {
                    action,
                    component,
                    text: line.to_string(),
                });
            }
        }
        let impact_rows: Vec<Vec<String>> = p
            .impact
            .iter()
            .map(|i| vec![format!("  {}", i.component), i.effect.clone()])
            .collect();
        PlanLines {
            title: format!("plan: {}", p.operation),
            digests: format!(
                "  topology {}  observed {}",
                short(&p.topology_digest),
                short(&p.observed_digest)
            ),
            nothing_to_do: p.is_noop().then(|| {
                "  nothing to do: everything is already in the requested state".to_string()
            }),
            waves,
            then: p.verify_stack.as_ref().map(|stack| {
                format!("then: check stack `{stack}`'s readiness probes (its routes, end to end)")
            }),
            impact: table(&impact_rows).lines().map(str::to_string).collect(),
            cleanup: (!p.cleanup.is_empty()).then(|| {
                format!(
                    "if it fails part-way: stop {} (in this order)",
                    p.cleanup.join(", ")
                )
            }),
        }
    }

    /// The plan as plain aligned text, every line ending in `\n`: title, digests,
    /// waves of steps, the stack check, impact, cleanup set.
    pub fn text(&self) -> String {
        let mut out = format!("{}\n{}\n", self.title, self.digests);
        if let Some(n) = &self.nothing_to_do {
            out.push_str(n);
            out.push('\n');
        }
        for w in &self.waves {
            out.push_str(&w.title);
            out.push('\n');
            for s in &w.steps {
                out.push_str(&s.text);
                out.push('\n');
            }
        }
        if let Some(t) = &self.then {
            out.push_str(t);
            out.push('\n');
        }
        if !self.impact.is_empty() {
            out.push_str("impact\n");
            for l in &self.impact {
                out.push_str(l);
                out.push('\n');
            }
        }
        if let Some(c) = &self.cleanup {
            out.push_str(c);
            out.push('\n');
        }
        out
    }
}

/// A refusal as lines: `flotilla stop llm: refused` (`verb`: the word typed, e.g.
/// `down` for the stop it stands for), then `  - reason` for each reason.
pub fn refusal_lines(r: &Refusal, verb: &str) -> Vec<String> {
    std::iter::once(format!("{}: refused", r.operation.typed_as(verb)))
        .chain(r.reasons.iter().map(|reason| format!("  - {reason}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Action, Impact, Operation, Step, Verb, Wave};

    fn step(action: Action, component: &str, reason: &str) -> Step {
        Step {
            action,
            adapter: Some(flotilla_model::inventory::AdapterKind::Process),
            after: Vec::new(),
            component: component.into(),
            host: "studio".into(),
            owner: Owner::Managed,
            reason: reason.into(),
        }
    }

    #[test]
    fn lines_align_across_waves_and_read_back_as_the_text() {
        let p = Plan {
            cleanup: vec!["llm".into()],
            format: crate::PLAN_FORMAT,
            inventory_version: 1,
            impact: vec![Impact {
                component: "proxy".into(),
                effect: "loses its upstream".into(),
            }],
            observed_digest: "sha256:0123456789abcdef0123".into(),
            operation: Operation::new(Verb::Start, "chat"),
            topology_digest: "sha256:fedcba9876543210fedc".into(),
            verify_stack: None,
            waves: vec![
                Wave {
                    steps: vec![step(Action::Start, "llm", "dependency of chat")],
                },
                Wave {
                    steps: vec![step(Action::Noop, "chat-ui", "already running")],
                },
            ],
        };
        let lines = PlanLines::of(&p);
        assert_eq!(lines.waves.len(), 2);
        assert_eq!(
            lines.text(),
            "plan: flotilla start chat\n  topology sha256:fedcba987654  observed sha256:0123456789ab\n\
wave 1\n  start  llm      on studio  process  dependency of chat\n\
wave 2\n  no-op  chat-ui  on studio  process  already running\n\
impact\n  proxy  loses its upstream\nif it fails part-way: stop llm (in this order)\n"
        );
        let r = Refusal {
            operation: Operation::new(Verb::Stop, "llm"),
            reasons: vec![crate::Reason::Unsettled {
                component: "llm".into(),
                lifecycle: "starting".into(),
            }],
        };
        assert_eq!(
            refusal_lines(&r, "stop"),
            [
                "flotilla stop llm: refused",
                "  - `llm` is starting; wait until it settles, then plan again"
            ]
        );
    }
}
