//! A plan's progress ([`crate::executor::Event`]) as the lines every face shows:
//! the CLI on standard error, the dashboard in an operation's page.

use crate::executor::Event;
use flotilla_plan::Action;

/// The line for `e`: `wave 1: start a …` when a step begins, `  start a: ok (120
/// ms): …` when it ends, `note: …`, `cleanup: stopping …`; `None` for probes and
/// no-op steps.
pub fn line(e: &Event) -> Option<String> {
    match e {
        Event::StepStarted { wave, step } if step.action != Action::Noop => {
            let w = if step.component.starts_with("stack:") {
                "then".to_string()
            } else if *wave == 0 {
                "cleanup".to_string()
            } else {
                format!("wave {wave}")
            };
            Some(format!(
                "{w}: {} {} …",
                step.action.as_str(),
                step.component
            ))
        }
        Event::StepFinished(r) if r.action != Action::Noop => Some(format!(
            "  {} {}: {} ({} ms): {}",
            if r.component.starts_with("stack:") {
                "verify"
            } else {
                r.action.as_str()
            },
            r.component,
            if r.outcome == flotilla_store::Outcome::Succeeded {
                "ok"
            } else {
                "FAILED"
            },
            r.took.as_millis(),
            r.summary
        )),
        Event::Note(text) => Some(format!("note: {text}")),
        Event::CleanupStarted { components } => Some(format!(
            "cleanup: stopping {} (started by this run), in this order",
            components.join(", ")
        )),
        _ => None,
    }
}
