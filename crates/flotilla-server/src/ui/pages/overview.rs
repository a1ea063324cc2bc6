//! The fleet overview, `/ui/`: counts (hosts, components, running, needing
//! attention), a filter (text and state), and every component of every host with
//! its lifecycle, health, condition, observability with its age and runtime
//! identity — what needs attention first. The same data as `GET /v1/status`
//! ([`crate::status::fleet_status`]), kept live on [`Topic::Fleet`],
//! [`Topic::Selection`] and [`Topic::Releases`].

use super::super::extract::Signed;
use super::super::hub::Topic;
use super::super::layout::{self, Nav};
use super::super::live::{parts_sink, stream_url, Fragment, Parts, Rendered};
use super::super::marks;
use super::super::session::Session;
use crate::api::{FleetStatus, HostStateDto};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_model::status::{ComponentStatus, Lifecycle};
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The live view's name (`/ui/events?view=overview`).
pub(crate) const VIEW: &str = "overview";
/// The fragment (and SSE event) holding the counts and the table.
pub(crate) const EVENT: &str = "overview";
const TOPICS: &[Topic] = &[Topic::Fleet, Topic::Selection, Topic::Releases];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new().route("/ui/", get(page::<S>))
}

pub(crate) fn feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::with_parts(
        EVENT,
        TOPICS,
        |state, session| async move { fragment(&state, &session).await },
    )])
}

/// The states the filter offers (each a word of a row's `data-state`).
const STATES: [&str; 8] = [
    "attention",
    "running",
    "stopped",
    "failed",
    "unhealthy",
    "unreachable",
    "unobserved",
    "drift",
];

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    // The render streams share, when nothing changed since it was made.
    let seq = state.ui.hub.seq();
    let since = state.ui.hub.id(seq);
    let key = (VIEW.to_owned(), None, EVENT.to_owned(), session.may_act());
    let (_, content) = state
        .ui
        .renders
        .get_or_render(key, seq, seq, fragment(&state, &session))
        .await;
    let body = html! {
        h1 { "Fleet overview" }
        div.filters role="search" {
            label { span { "Filter " kbd { "/" } } input type="search" data-filter placeholder="host or component" aria-label="Filter by host or component"; }
            label { "State" select data-filter-state aria-label="Filter by state" {
                option value="" { "all" }
                @for s in STATES { option value=(s) { (s) } }
            } }
            span.muted data-filter-count aria-live="polite" {}
        }
        div sse-swap=(EVENT) { (maud::PreEscaped(&*content.html)) }
        (parts_sink(EVENT))
    };
    let live = stream_url(VIEW, None, &since);
    Html(layout::page(&session, Nav::Overview, "Overview", Some(&live), body).into_string())
        .into_response()
}

/// The counts and the table, now, with its parts: the counts, the selection, each
/// row and the hosts without components.
pub(crate) async fn fragment<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
) -> Rendered {
    let _ = session;
    match crate::status::fleet_status(state).await {
        Ok(fleet) => render(&fleet),
        Err(f) => Rendered::from(
            html! { div.notice.bad role="alert" { "Cannot read the fleet's status: " (f.message()) } },
        ),
    }
}

/// The hosts by name.
pub(crate) fn hosts_by_name(fleet: &FleetStatus) -> HashMap<&str, &HostStateDto> {
    fleet.hosts.iter().map(|h| (h.host.as_str(), h)).collect()
}

/// How many components needing attention the overview lists above its table.
const ATTENTION_SHOWN: usize = 50;

/// A component needing attention, in the list above the table (not a filterable
/// row: the table has them all).
fn attention_row(c: &ComponentStatus, host: Option<&HostStateDto>) -> Markup {
    html! {
        tr {
            td data-label="Host" { a href=(Link::Host(c.host.clone()).path()) { (layout::visible(&c.host)) } }
            th scope="row" data-label="Component" { a href=(Link::Component(c.name.clone()).path()) { (layout::visible(&c.name)) } }
            td data-label="Lifecycle" { (marks::lifecycle(c)) }
            td data-label="Health" { (marks::health(c.health)) }
            td data-label="Condition" { (marks::condition(c.condition)) }
            td data-label="Observability" { (marks::observability(c.observability, host.and_then(|h| h.last_report_ms))) }
        }
    }
}

fn render(fleet: &FleetStatus) -> Rendered {
    let comps = &fleet.report.components;
    let hosts = hosts_by_name(fleet);
    let running = comps
        .iter()
        .filter(|c| c.lifecycle == Lifecycle::Running)
        .count();
    // Rows keep their place (by host, then name) whatever their state, so a change
    // of state replaces one row and never reorders the table; what needs attention
    // is listed first, on its own, above it.
    let mut order: Vec<usize> = (0..comps.len()).collect();
    order.sort_by(|i, j| {
        comps[*i]
            .host
            .cmp(&comps[*j].host)
            .then_with(|| comps[*i].name.cmp(&comps[*j].name))
    });
    let needing: Vec<usize> = order
        .iter()
        .copied()
        .filter(|i| marks::needs_attention(&comps[*i]))
        .collect();
    let attention = needing.len();
    let silent: Vec<&HostStateDto> = fleet
        .hosts
        .iter()
        .filter(|h| !comps.iter().any(|c| c.host == h.host))
        .collect();
    let mut parts = Parts::default();
    let mut layout = std::collections::hash_map::DefaultHasher::new();
    let counts = parts.push(html! {
        ul.counts #ov-counts aria-label="Counts" {
            li { b data-count="hosts" { (fleet.hosts.len()) } "hosts" }
            li { b data-count="components" { (comps.len()) } "components" }
            li { b data-count="running" { (running) } "running" }
            li { b data-count="attention" { (attention) } "need attention" }
        }
    });
    let selection = parts.push(
        html! {
            div #ov-selection {
                @if let Some(sel) = &fleet.selection {
                    p.muted { "Selected revision " a href=(Link::Revision(sel.revision.clone()).path()) { code { (layout::short_digest(&sel.revision)) } } " (selection " (sel.index) ")" }
                } @else {
                    p.notice { "No revision is selected yet: publish one with " code { "flotilla config publish" } "." }
                }
            }
        },
    );
    let needs = parts.push(
        html! {
            div #ov-attention {
                @if !needing.is_empty() {
                    div.table-wrap {
                        table.stack #attention {
                            caption { b { "Needs attention" } " (" (attention) ")" }
                            thead { tr {
                                th scope="col" { "Host" } th scope="col" { "Component" } th scope="col" { "Lifecycle" }
                                th scope="col" { "Health" } th scope="col" { "Condition" } th scope="col" { "Observability" }
                            } }
                            tbody { @for i in needing.iter().take(ATTENTION_SHOWN) {
                                (attention_row(&comps[*i], hosts.get(comps[*i].host.as_str()).copied()))
                            } }
                        }
                    }
                    @if attention > ATTENTION_SHOWN {
                        p.muted { "and " (attention - ATTENTION_SHOWN) " more: choose the state " b { "attention" } " above to list them all." }
                    }
                }
            }
        },
    );
    let mut rows = String::with_capacity(order.len() * 400);
    for (n, i) in order.iter().enumerate() {
        let c = &comps[*i];
        (c.host.as_str(), c.name.as_str()).hash(&mut layout);
        let id = format!("r{n}");
        let attn = marks::needs_attention(c);
        let r = parts.push(row(
            c,
            attn,
            hosts.get(c.host.as_str()).copied(),
            true,
            Some(&id),
        ));
        rows.push_str(&r.0);
    }
    let silent = parts.push(
        html! {
            div #ov-silent {
                @if !silent.is_empty() {
                    h2 { "Hosts without components" }
                    ul { @for h in &silent {
                        li { a href=(Link::Host(h.host.clone()).path()) { (layout::visible(&h.host)) } " — " (marks::host_state(h)) }
                    } }
                }
            }
        },
    );
    parts.layout = layout.finish();
    let whole = html! {
        (counts)
        (selection)
        (needs)
        @if comps.is_empty() {
            p { "No components yet." }
        } @else {
            div.table-wrap {
                table.stack #components {
                    caption.muted { "Components by host" }
                    thead { tr {
                        th scope="col" { "Host" } th scope="col" { "Component" } th scope="col" { "Lifecycle" }
                        th scope="col" { "Health" } th scope="col" { "Condition" } th scope="col" { "Observability" }
                        th scope="col" { "Runtime" }
                    } }
                    tbody { (maud::PreEscaped(rows)) }
                }
            }
        }
        (silent)
    };
    Rendered {
        html: whole.into_string().into(),
        parts: Some(std::sync::Arc::new(parts)),
    }
}

/// One component's row; `with_host`: a first cell naming (and linking) its host.
pub(crate) fn row(
    c: &ComponentStatus,
    attention: bool,
    host: Option<&HostStateDto>,
    with_host: bool,
    id: Option<&str>,
) -> Markup {
    let state_words = format!(
        "{}{} {} {} {}",
        if attention { "attention " } else { "" },
        c.lifecycle.as_str(),
        c.health.as_str(),
        c.condition.as_str(),
        c.observability.as_str(),
    );
    let text = format!("{} {}", c.host, c.name).to_lowercase();
    let (host_name, name) = (layout::visible(&c.host), layout::visible(&c.name));
    let at = host.and_then(|h| h.last_report_ms);
    // The overview's rows (those with an id) carry no cell labels: its stylesheet
    // names the columns by place on a narrow screen.
    let label = |l: &'static str| id.is_none().then_some(l);
    html! {
        tr id=[id] data-row data-state=(state_words) data-text=(text) {
            @if with_host {
                td data-label=[label("Host")] { a href=(Link::Host(c.host.clone()).path()) { (host_name) } }
            }
            th scope="row" data-label=[label("Component")] { a href=(Link::Component(c.name.clone()).path()) { (name) } }
            td data-label=[label("Lifecycle")] { (marks::lifecycle(c)) }
            td data-label=[label("Health")] { (marks::health(c.health)) }
            td data-label=[label("Condition")] { (marks::condition(c.condition)) }
            td data-label=[label("Observability")] { (marks::observability(c.observability, at)) }
            td.nowrap data-label=[label("Runtime")] {
                @if let Some(r) = &c.runtime_identity {
                    code title=[id.is_none().then_some(&r.measured.exe_sha256)] { (layout::short_digest(&r.measured.exe_sha256)) }
                    " " span.muted { "pid " (r.measured.pid) }
                } @else {
                    span.muted { "—" }
                }
            }
        }
    }
}
