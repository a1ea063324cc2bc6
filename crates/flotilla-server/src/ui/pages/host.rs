//! A host, `/ui/hosts/{host}`: its agent (platform, version, the digest it measured
//! of its own executable against its release, pid), its last report's age and the
//! revision it applied, its observability, recent events and drift, and its
//! components. Live on [`Topic::Fleet`], [`Topic::Selection`] and
//! [`Topic::Releases`]. A host the authority does not know is a 404 page.

use super::super::extract::Signed;
use super::super::hub::Topic;
use super::super::layout::{self, Nav};
use super::super::live::{stream_url, Fragment};
use super::super::marks;
use super::super::session::Session;
use super::overview::row;
use crate::api::FleetStatus;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The live view's name (`/ui/events?view=host&arg=NAME`).
pub(crate) const VIEW: &str = "host";
/// The fragment (and SSE event) holding everything below the title.
pub(crate) const EVENT: &str = "host";
const TOPICS: &[Topic] = &[Topic::Fleet, Topic::Selection, Topic::Releases];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new().route("/ui/hosts/{host}", get(page::<S>))
}

pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    let host = arg?.to_string();
    Some(vec![Fragment::new(EVENT, TOPICS, move |state, session| {
        let host = host.clone();
        async move {
            fragment(&state, &session, &host).await.unwrap_or_else(
                || html! { p role="alert" { "The authority no longer knows this host." } },
            )
        }
    })])
}

fn known(fleet: &FleetStatus, host: &str) -> bool {
    fleet.hosts.iter().any(|h| h.host == host)
        || fleet.report.components.iter().any(|c| c.host == host)
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(host): Path<String>,
) -> Response {
    let since = state.ui.hub.mark();
    let Some(content) = fragment(&state, &session, &host).await else {
        return layout::not_found(&session, Nav::Overview, &format!("host `{host}`"));
    };
    let body = html! {
        nav aria-label="Breadcrumb" { a href=(Link::Overview.path()) { "Overview" } " › host" }
        h1 { "Host " code { (layout::visible(&host)) } }
        div sse-swap=(EVENT) { (content) }
    };
    let live = stream_url(VIEW, Some(&host), &since);
    Html(
        layout::page(
            &session,
            Nav::Overview,
            &format!("Host {host}"),
            Some(&live),
            body,
        )
        .into_string(),
    )
    .into_response()
}

/// The host's facts and components now; `None` when the authority does not know it.
async fn fragment<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    host: &str,
) -> Option<Markup> {
    let _ = session;
    let fleet = match crate::status::fleet_status(state).await {
        Ok(f) => f,
        Err(f) => {
            return Some(
                html! { div.notice.bad role="alert" { "Cannot read the fleet's status: " (f.message()) } },
            )
        }
    };
    if !known(&fleet, host) {
        return None;
    }
    let h = fleet.hosts.iter().find(|h| h.host == host);
    let report = h.and_then(|h| h.report.as_ref());
    let id = h.and_then(|h| h.agent_identity.as_ref());
    let comps: Vec<_> = fleet
        .report
        .components
        .iter()
        .filter(|c| c.host == host)
        .collect();
    Some(html! {
        h2 { "Agent" }
        dl.facts {
            dt { "Observability" }
            dd { @if let Some(h) = h { (marks::host_state(h)) } @else { (layout::mark(layout::Tone::Neutral, "no agent")) } }
            dt { "Last report" }
            dd { @match h.and_then(|h| h.age_ms) { Some(a) => { (layout::age(a)) " ago" }, None => span.muted { "never" } } }
            dt { "Platform" }
            dd { @match report { Some(r) => code { (layout::visible(&r.platform)) }, None => span.muted { "—" } } }
            dt { "Agent version" }
            dd { @match report { Some(r) => (layout::visible(&r.agent_version)), None => span.muted { "—" } } }
            dt { "Measured digest" }
            dd {
                @match id.and_then(|i| i.running_sha256.as_ref()) {
                    Some(d) => { code title=(d) { (layout::short_digest(d)) } " " (identity_mark(id.map(|i| i.runtime_identity.as_str()))) },
                    None => span.muted { "not reported" },
                }
            }
            @if let Some(rel) = id.and_then(|i| i.release.as_ref()) {
                dt { "Release" }
                dd { (rel.name) " " (rel.version) }
            }
            @if let Some(pid) = id.and_then(|i| i.pid) {
                dt { "Agent pid" }
                dd { (pid) }
            }
            @if let Some(c) = id.and_then(|i| i.conflict.as_ref()) {
                dt { "Conflict" }
                dd { (layout::mark(layout::Tone::Bad, c)) }
            }
            dt { "Revision applied" }
            dd { @match h.and_then(|h| h.revision.as_ref()) {
                Some(r) => a href=(Link::Revision(r.clone()).path()) { code { (layout::short_digest(r)) } },
                None => span.muted { "none" },
            } }
            @if let Some(op) = h.and_then(|h| h.report_before.as_ref()) {
                dt { "Report" }
                dd { (layout::mark(layout::Tone::Warn, &format!("measured before {op}: a newer report is due"))) }
            }
        }
        h2 { "Components" }
        @if comps.is_empty() {
            p.muted { "None on this host." }
        } @else {
            div.table-wrap {
                table.stack {
                    thead { tr {
                        th scope="col" { "Component" } th scope="col" { "Lifecycle" } th scope="col" { "Health" }
                        th scope="col" { "Condition" } th scope="col" { "Observability" } th scope="col" { "Runtime" }
                    } }
                    tbody { @for c in &comps { (row(c, marks::needs_attention(c), h, false, None)) } }
                }
            }
        }
        @if let Some(r) = report {
            @if !r.drift.is_empty() {
                h2 { "Drift" }
                ul { @for d in &r.drift { li { code { (layout::visible(&d.component)) } " — " (layout::visible(&d.kind)) } } }
            }
            @if !r.events.is_empty() {
                h2 { "Recent events" }
                ol.muted reversed { @for e in r.events.iter().rev().take(20) { li { (layout::visible(e)) } } }
            }
        }
    })
}

fn identity_mark(word: Option<&str>) -> Markup {
    match word {
        Some("matches") => layout::mark(layout::Tone::Good, "matches its release"),
        Some("differs") => layout::mark(layout::Tone::Bad, "differs from its release"),
        Some("no-release") => layout::mark(layout::Tone::Neutral, "no release selected"),
        Some(other) => layout::mark(layout::Tone::Neutral, other),
        None => html! {},
    }
}
