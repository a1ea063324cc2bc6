//! Status signals as the dashboard shows them: each with its name (the API's
//! kebab-case word) and a [`Tone`], drawn by [`layout::mark`] as text plus symbol.

use super::layout::{self, Tone};
use flotilla_model::status::{
    ComponentStatus, Condition, DesiredLifecycle, Health, Lifecycle, Observability,
};
use maud::Markup;

/// A lifecycle's name.
pub fn lifecycle_name(l: Lifecycle) -> &'static str {
    match l {
        Lifecycle::Running => "running",
        Lifecycle::Stopped => "stopped",
        Lifecycle::Starting => "starting",
        Lifecycle::Stopping => "stopping",
        Lifecycle::Failed => "failed",
        Lifecycle::Unknown => "unknown",
    }
}

/// A health's name.
pub fn health_name(h: Health) -> &'static str {
    match h {
        Health::Healthy => "healthy",
        Health::Degraded => "degraded",
        Health::Unhealthy => "unhealthy",
        Health::Unknown => "unknown",
        Health::NotApplicable => "n/a",
    }
}

/// An observability's name.
pub fn observability_name(o: Observability) -> &'static str {
    match o {
        Observability::Observed => "observed",
        Observability::Unreachable => "unreachable",
        Observability::NotPermitted => "not-permitted",
        Observability::Unsupported => "unsupported",
        Observability::Unobserved => "unobserved",
    }
}

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
    layout::mark(tone, lifecycle_name(c.lifecycle))
}

/// A health.
pub fn health(h: Health) -> Markup {
    let tone = match h {
        Health::Healthy => Tone::Good,
        Health::Degraded => Tone::Warn,
        Health::Unhealthy => Tone::Bad,
        Health::Unknown | Health::NotApplicable => Tone::Neutral,
    };
    layout::mark(tone, health_name(h))
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

/// An observability, with the age of what it rests on when known (`observed · 4 s`).
pub fn observability(o: Observability, age_ms: Option<i64>) -> Markup {
    let tone = match o {
        Observability::Observed => Tone::Good,
        Observability::Unreachable => Tone::Bad,
        _ => Tone::Neutral,
    };
    match age_ms {
        Some(a) => layout::mark(
            tone,
            &format!("{} · {}", observability_name(o), layout::age(a)),
        ),
        None => layout::mark(tone, observability_name(o)),
    }
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
    match h.age_ms {
        Some(a) => layout::mark(tone, &format!("{} · {}", h.observability, layout::age(a))),
        None => layout::mark(tone, &h.observability),
    }
}
