//! Status signals as the dashboard shows them: each with its name (the API's
//! kebab-case word) and a [`Tone`], drawn by [`layout::mark`] as text plus symbol.

use super::layout::{self, Tone};
use flotilla_model::status::{
    ComponentStatus, Condition, DesiredLifecycle, Health, Lifecycle, Observability,
};
use maud::{html, Markup};

/// The component's lifecycle, judged against what is desired.
pub fn lifecycle(c: &ComponentStatus) -> Markup {
    let tone = match (c.lifecycle, c.desired) {
        (Lifecycle::Running, Some(DesiredLifecycle::Stopped | DesiredLifecycle::Disabled)) => {
            Tone::Warn
        }
        (Lifecycle::Running, _) => Tone::Good,
        (Lifecycle::Stopped, Some(DesiredLifecycle::Running)) => Tone::Bad,
        (Lifecycle::Failed, _) => Tone::Bad,
        (Lifecycle::Starting | Lifecycle::Stopping, _) => Tone::Warn,
        (Lifecycle::Stopped | Lifecycle::Unknown, _) => Tone::Neutral,
    };
    match &c.last_known {
        // Not observed now: what was seen last, and when, beside `unknown`.
        Some(l) => html! {
            (layout::mark(tone, c.lifecycle.as_str()))
            " " span.muted.last-known { "last known " (l.lifecycle.as_str()) ", " (layout::since(l.observed_at_ms)) " ago" }
        },
        None => layout::mark(tone, c.lifecycle.as_str()),
    }
}

/// A health.
pub fn health(h: Health) -> Markup {
    let tone = match h {
        Health::Healthy => Tone::Good,
        Health::Degraded => Tone::Warn,
        Health::Unhealthy => Tone::Bad,
        Health::Unknown | Health::NotApplicable => Tone::Neutral,
    };
    layout::mark(tone, h.as_str())
}

/// A condition.
pub fn condition(c: Condition) -> Markup {
    let tone = match c {
        Condition::Ok => Tone::Good,
        Condition::Drift | Condition::StaleRuntime | Condition::Attention => Tone::Warn,
        Condition::DownUnexpectedly | Condition::Error => Tone::Bad,
    };
    layout::mark(tone, c.as_str())
}

/// An observability, with the age of what it rests on when known (`observed · 4 s`):
/// `at_ms`, when it was observed (ms since the Unix epoch), shown as an age the page
/// keeps current ([`layout::since`]).
pub fn observability(o: Observability, at_ms: Option<i64>) -> Markup {
    let tone = match o {
        Observability::Observed => Tone::Good,
        Observability::Unreachable => Tone::Bad,
        _ => Tone::Neutral,
    };
    layout::mark_since(tone, o.as_str(), at_ms)
}

/// Whether a component needs a human's look: not as desired, unhealthy, a
/// condition, or not observed now.
pub fn needs_attention(c: &ComponentStatus) -> bool {
    !c.is_ok() || c.condition != Condition::Ok || c.observability != Observability::Observed
}

/// A host's observability (`observed`, `unreachable`, `never-reported`) with the age
/// of its last report.
pub fn host_state(h: &crate::api::HostStateDto) -> Markup {
    let tone = match h.observability.as_str() {
        "observed" => Tone::Good,
        "unreachable" => Tone::Bad,
        _ => Tone::Neutral,
    };
    layout::mark_since(tone, &h.observability, h.last_report_ms)
}
