//! A component, `/ui/components/{name}`: every status signal (lifecycle, desired
//! lifecycle, health, condition, observability, ownership, config identity, runtime
//! identity) with its evidence (source, age, what was seen), the config it runs
//! against the one selected and what differs key by key, restarts, the operations
//! that touched it, its start/stop/restart actions (plan first) and its log,
//! following live. The data is the status route's ([`crate::status::fleet_status`]);
//! live on [`Topic::Fleet`] and [`Topic::Selection`].

use super::super::super::extract::Signed;
use super::super::super::hub::Topic;
use super::super::super::layout::{self, Nav, Tone};
use super::super::super::live::{stream_url, Fragment};
use super::super::super::marks;
use super::actions::{buttons, run_view, runs_touching};
use super::VIEW;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_model::status::{ComponentStatus, DesiredLifecycle, Evidence, Signal, StartedBy};
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The fragment (SSE event) of the status and identities.
const STATUS: &str = "component";
/// The fragment (SSE event) of the operations that touched it.
const OPERATIONS: &str = "operations";
const TOPICS: &[Topic] = &[Topic::Fleet, Topic::Selection];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new().route("/ui/components/{name}", get(page::<S>))
}

pub(crate) fn feed<S: AuthorityStore>(name: String) -> Vec<Fragment<S>> {
    let n2 = name.clone();
    vec![
        Fragment::new(STATUS, TOPICS, move |state, _session| {
            let name = name.clone();
            async move {
                status(&state, &name).await.unwrap_or_else(
                    || html! { p role="alert" { "The authority no longer knows this component." } },
                )
            }
        }),
        Fragment::new(OPERATIONS, TOPICS, move |state, _session| {
            let name = n2.clone();
            async move { operations(&state, &name) }
        }),
    ]
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(name): Path<String>,
) -> Response {
    let since = state.ui.hub.mark();
    let Some(content) = status(&state, &name).await else {
        return layout::not_found(&session, Nav::Overview, &format!("component `{name}`"));
    };
    let link = Link::Component(name.clone());
    let body = html! {
        (super::files::head())
        nav aria-label="Breadcrumb" { a href=(Link::Overview.path()) { "Overview" } " › component" }
        h1 { "Component " code { (layout::visible(&name)) } }
        (buttons(&session, &name, &[("start", "Start"), ("stop", "Stop"), ("restart", "Restart")]))
        div sse-swap=(STATUS) { (content) }
        h2 #operations { "Operations" }
        div sse-swap=(OPERATIONS) { (operations(&state, &name)) }
        (super::logs::pane(&name, &state.settings.public_url))
    };
    let arg = link.path().trim_start_matches("/ui/").to_string();
    let live = stream_url(VIEW, Some(&arg), &since);
    Html(
        layout::page(
            &session,
            Nav::Overview,
            &format!("Component {name}"),
            Some(&live),
            body,
        )
        .into_string(),
    )
    .into_response()
}

fn desired_name(d: Option<DesiredLifecycle>) -> &'static str {
    match d {
        Some(DesiredLifecycle::Running) => "running",
        Some(DesiredLifecycle::Stopped) => "stopped",
        Some(DesiredLifecycle::Disabled) => "disabled",
        None => "not recorded",
    }
}

/// The evidence of `signal`, each as `source · age ago — what was seen`; without
/// any, `derived` (what the report says of it, and where that comes from), dated
/// by the report (`report_age_ms`).
fn evidence(
    c: &ComponentStatus,
    signal: Signal,
    now_ms: i64,
    derived: Option<(String, String)>,
    report_age_ms: Option<i64>,
) -> Markup {
    let of: Vec<&Evidence> = c.evidence.iter().filter(|e| e.signal == signal).collect();
    html! {
        @if of.is_empty() {
            @match derived {
                Some((source, saw)) => ul.evidence { li {
                    span.source { (layout::visible(&source)) }
                    @if let Some(a) = report_age_ms { " · " span.muted { (layout::age(a)) " ago" } }
                    " — " span.saw { (layout::visible(&saw)) }
                } },
                None => span.muted { "no evidence reported" },
            }
        } @else {
            ul.evidence {
                @for e in of {
                    li {
                        span.source { (layout::visible(&e.source)) }
                        " · " span.muted { (layout::age(now_ms - e.at_ms)) " ago" }
                        " — " span.saw { (layout::visible(&e.saw)) }
                    }
                }
            }
        }
    }
}

fn digest_or(d: Option<&str>, none: &str) -> Markup {
    match d {
        Some(d) => html! { code title=(d) { (layout::short_digest(d)) } },
        None => html! { span.muted { (none) } },
    }
}

/// The component's signals, identities, drift and restarts now; `None` when the
/// authority does not know it.
async fn status<S: AuthorityStore>(state: &AppState<S>, name: &str) -> Option<Markup> {
    let fleet = match crate::status::fleet_status(state).await {
        Ok(f) => f,
        Err(f) => {
            return Some(
                html! { div.notice.bad role="alert" { "Cannot read the fleet's status: " (f.message()) } },
            )
        }
    };
    let c = fleet.report.components.iter().find(|c| c.name == name)?;
    let now = fleet.now_ms;
    let host = fleet.hosts.iter().find(|h| h.host == c.host);
    let age = host.and_then(|h| h.age_ms);
    let config = &c.config_identity;
    let config_mark = match &config.running {
        Some(r) if *r == config.selected => layout::mark(Tone::Good, "runs the selected config"),
        Some(_) => layout::mark(Tone::Warn, "runs another config (drift)"),
        None => layout::mark(Tone::Neutral, "not running"),
    };
    let runtime_mark = match &c.runtime_identity {
        Some(r) => match (&r.release, r.on_disk_sha256.as_deref()) {
            (Some(rel), _) if rel.sha256 == r.measured.exe_sha256 => {
                layout::mark(Tone::Good, "runs its release")
            }
            (Some(_), _) => layout::mark(Tone::Bad, "differs from its release"),
            (None, Some(disk)) if disk != r.measured.exe_sha256 => {
                layout::mark(Tone::Warn, "the executable on disk changed (stale runtime)")
            }
            (None, _) => layout::mark(Tone::Good, "measured"),
        },
        None => layout::mark(Tone::Neutral, "no process measured"),
    };
    let short = |d: &str| layout::short_digest(d).to_string();
    let agent = format!("agent {}", c.host);
    let observed = host.map(|h| {
        (
            agent.clone(),
            match h.age_ms {
                Some(_) => format!(
                    "its last report (dated here); unreachable after {} without one",
                    layout::age(fleet.report_deadline_ms)
                ),
                None => "it has never reported".to_string(),
            },
        )
    });
    let condition = (c.condition == flotilla_model::status::Condition::Ok).then(|| {
        (
            agent.clone(),
            "nothing beyond health is wrong: no drift, no stale runtime, not down unexpectedly, no operation left unfinished".to_string(),
        )
    });
    let config_seen = Some((
        format!("{agent} (the config its instance was started with)"),
        format!(
            "selected {} · running {}",
            short(&config.selected),
            config
                .running
                .as_deref()
                .map_or("nothing".to_string(), short)
        ),
    ));
    let runtime_seen = c.runtime_identity.as_ref().map(|r| {
        (
            format!("{agent}: /proc/{}/exe", r.measured.pid),
            format!(
                "measured {} · on disk now {}",
                short(&r.measured.exe_sha256),
                r.on_disk_sha256
                    .as_deref()
                    .map_or("not measured".to_string(), short)
            ),
        )
    });
    let started_by = match &c.started_by {
        StartedBy::Nobody => "nobody".to_string(),
        StartedBy::Flotilla { operation } => format!("Flotilla, operation {operation}"),
        StartedBy::Foreign { evidence } => format!("another process: {evidence}"),
    };
    Some(html! {
        h2 { "Status signals" }
        div.table-wrap {
            table.stack.signals {
                thead { tr { th scope="col" { "Signal" } th scope="col" { "Value" } th scope="col" { "Evidence (source · age — what was seen)" } } }
                tbody {
                    tr { th scope="row" { "Lifecycle" } td data-label="Value" { (marks::lifecycle(c)) } td data-label="Evidence" { (evidence(c, Signal::Lifecycle, now, None, age)) } }
                    tr { th scope="row" { "Desired lifecycle" } td data-label="Value" { (desired_name(c.desired)) }
                        td data-label="Evidence" { span.source { "journal of its host" } " — " span.saw { "started by " (layout::visible(&started_by)) } } }
                    tr { th scope="row" { "Health" } td data-label="Value" { (marks::health(c.health)) } td data-label="Evidence" { (evidence(c, Signal::Health, now, None, age)) } }
                    tr { th scope="row" { "Condition" } td data-label="Value" { (marks::condition(c.condition)) } td data-label="Evidence" { (evidence(c, Signal::Condition, now, condition, age)) } }
                    tr { th scope="row" { "Observability" } td data-label="Value" { (marks::observability(c.observability, host.and_then(|h| h.last_report_ms))) } td data-label="Evidence" { (evidence(c, Signal::Observability, now, observed, age)) } }
                    tr { th scope="row" { "Ownership" } td data-label="Value" { (c.ownership.to_string()) }
                        td data-label="Evidence" {
                            span.source { "inventory" }
                            @if let Some(e) = &c.owner_error { " — " (layout::mark(Tone::Bad, &format!("its owner cannot be asked: {}", layout::visible(e)))) }
                        } }
                    tr { th scope="row" { "Config identity" } td data-label="Value" { (config_mark) } td data-label="Evidence" { (evidence(c, Signal::ConfigIdentity, now, config_seen, age)) } }
                    tr { th scope="row" { "Runtime identity" } td data-label="Value" { (runtime_mark) } td data-label="Evidence" { (evidence(c, Signal::RuntimeIdentity, now, runtime_seen, age)) } }
                }
            }
        }
        @if let Some(l) = &c.last_known {
            p.notice { "Last known (" (layout::age(now - l.observed_at_ms)) " ago): "
                (l.lifecycle.as_str()) ", " (l.health.as_str()) ", " (l.condition.as_str()) }
        }
        h2 { "Identity" }
        dl.facts {
            dt { "Host" }
            dd { a href=(Link::Host(c.host.clone()).path()) { (layout::visible(&c.host)) } " " @if let Some(h) = host { (marks::host_state(h)) } }
            dt { "Config selected" } dd { (digest_or(Some(&config.selected), "")) }
            dt { "Config running" } dd { (digest_or(config.running.as_deref(), "not running")) }
            @if let Some(r) = &c.runtime_identity {
                dt { "Process" } dd { "pid " (r.measured.pid) ", process group " (r.measured.pgid) ", started " (layout::age(now - r.started_at_ms)) " ago" }
                dt { "Executable" } dd { code { (layout::visible(&r.measured.exe.display().to_string())) } }
                dt { "Executable digest (measured)" } dd { (digest_or(Some(&r.measured.exe_sha256), "")) }
                dt { "On disk now" } dd { (digest_or(r.on_disk_sha256.as_deref(), "not measured")) }
                dt { "Arguments digest" } dd { (digest_or(Some(&r.measured.argv_digest), "")) }
                dt { "Started by" } dd { code { (layout::visible(&r.started_by_operation)) } }
                @if let Some(rel) = &r.release {
                    dt { "Release" } dd { (layout::visible(&rel.name)) " " (layout::visible(&rel.version)) " " (digest_or(Some(&rel.sha256), "")) " (rollout " (rel.rollout) ")" }
                }
            }
            dt { "Restarts" }
            dd { @match c.restarts { Some(n) => (n), None => span.muted { "not counted by its owner" } } }
            @if let Some(ports) = &c.running_ports {
                dt { "Ports" } dd { @for (i, p) in ports.iter().enumerate() { @if i > 0 { ", " } (p) } }
            }
        }
        h2 { "Drift" }
        @if c.config_changes.is_empty() {
            p.muted { "No difference between the config it runs and the selected one." }
        } @else {
            p { "It runs a config that differs from the selected one, key by key:" }
            ul.drift { @for ch in &c.config_changes { li { code { (layout::visible(ch)) } } } }
            (layout::command(&format!("flotilla restart {}", shlex::try_quote(name).map(|s| s.into_owned()).unwrap_or_default())))
        }
    })
}

/// The operations that touched the component: applied here (with their progress),
/// and the one that started what runs.
fn operations<S: AuthorityStore>(state: &AppState<S>, name: &str) -> Markup {
    let runs = runs_touching(state, name);
    html! {
        @if runs.is_empty() {
            p.muted { "No operation on it from this dashboard since the authority started (the journal of its host has every one: " code { "flotilla operations" } ")." }
        }
        @for r in runs.iter().take(5) { (run_view(r)) }
    }
}
