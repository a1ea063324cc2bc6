//! Stacks: `/ui/stacks` (every stack of the selected revision, its members and how
//! many run) and `/ui/stacks/{name}` (its members and their state, its route health,
//! up/down with the plan first, the operations on it). Members are live on
//! [`Topic::Fleet`] and [`Topic::Selection`]. Route health is the stack's own
//! readiness probes (its routes, end to end, as `flotilla status` runs them), run by
//! the authority when the page opens and on request (`GET
//! /ui/stacks/{name}/routes`), never on every report: they are requests to the
//! services themselves.

use super::super::super::extract::Signed;
use super::super::super::hub::Topic;
use super::super::super::layout::{self, Nav};
use super::super::super::live::{stream_url, Fragment};
use super::super::super::marks;
use super::super::overview::row;
use super::actions::{buttons, run_view, runs_touching};
use super::VIEW;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_model::status::Lifecycle;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

const EVENT: &str = "stacks";
const TOPICS: &[Topic] = &[Topic::Fleet, Topic::Selection];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/stacks", get(list_page::<S>))
        .route("/ui/stacks/{name}", get(stack_page::<S>))
        .route("/ui/stacks/{name}/routes", get(routes_now::<S>))
}

pub(crate) fn feed<S: AuthorityStore>(stack: Option<String>) -> Vec<Fragment<S>> {
    vec![Fragment::new(EVENT, TOPICS, move |state, _session| {
        let stack = stack.clone();
        async move {
            match &stack {
                None => list(&state).await,
                Some(s) => members(&state, s).await.unwrap_or_else(
                    || html! { p role="alert" { "The selected revision no longer has this stack." } },
                ),
            }
        }
    })]
}

async fn list_page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    let since = state.ui.hub.mark();
    let body = html! {
        (super::files::head())
        h1 { "Stacks" }
        div sse-swap=(EVENT) { (list(&state).await) }
    };
    let live = stream_url(VIEW, Some("stacks"), &since);
    Html(layout::page(&session, Nav::Stacks, "Stacks", Some(&live), body).into_string())
        .into_response()
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let Some(cur) = state.current() else {
        return html! { p.muted { "No revision is selected." } };
    };
    let fleet = crate::status::fleet_status(state).await.ok();
    let running = |n: &str| {
        fleet.as_ref().is_some_and(|f| {
            f.report
                .components
                .iter()
                .any(|c| c.name == n && c.lifecycle == Lifecycle::Running)
        })
    };
    html! {
        @if cur.topology.stacks.is_empty() {
            p.muted { "The selected revision declares no stack." }
        } @else {
            div.table-wrap { table.stack {
                thead { tr { th scope="col" { "Stack" } th scope="col" { "Members" } th scope="col" { "Running" } th scope="col" { "Route probes" } } }
                tbody { @for s in cur.topology.stacks.values() {
                    @let up = s.components.iter().filter(|m| running(m)).count();
                    tr {
                        th scope="row" data-label="Stack" { a href=(Link::Stack(s.name.clone()).path()) { (layout::visible(&s.name)) } }
                        td data-label="Members" { @for (i, m) in s.components.iter().enumerate() { @if i > 0 { ", " } a href=(Link::Component(m.clone()).path()) { (layout::visible(m)) } } }
                        td data-label="Running" { (layout::mark(if up == s.components.len() { layout::Tone::Good } else if up == 0 { layout::Tone::Neutral } else { layout::Tone::Warn }, &format!("{up} of {}", s.components.len()))) }
                        td data-label="Route probes" { (s.readiness.len()) }
                    }
                } }
            } }
        }
    }
}

async fn stack_page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(name): Path<String>,
) -> Response {
    let since = state.ui.hub.mark();
    let Some(content) = members(&state, &name).await else {
        return layout::not_found(&session, Nav::Stacks, &format!("stack `{name}`"));
    };
    let routes_url = format!("{}/routes", Link::Stack(name.clone()).path());
    let body = html! {
        (super::files::head())
        nav aria-label="Breadcrumb" { a href=(Link::Stacks.path()) { "Stacks" } " › stack" }
        h1 { "Stack " code { (layout::visible(&name)) } }
        (buttons(&session, &name, &[("up", "Up"), ("down", "Down"), ("restart", "Restart")]))
        div sse-swap=(EVENT) { (content) }
        h2 { "Route health" }
        div #routes { (route_health(&state, &name).await) }
        button type="button" hx-get=(routes_url) hx-target="#routes" { "Check the routes now" }
    };
    let arg = Link::Stack(name.clone())
        .path()
        .trim_start_matches("/ui/")
        .to_string();
    let live = stream_url(VIEW, Some(&arg), &since);
    Html(
        layout::page(
            &session,
            Nav::Stacks,
            &format!("Stack {name}"),
            Some(&live),
            body,
        )
        .into_string(),
    )
    .into_response()
}

async fn routes_now<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(_session): Signed,
    Path(name): Path<String>,
) -> Response {
    Html(route_health(&state, &name).await.into_string()).into_response()
}

/// The stack's members and their state, and the operations on it; `None` when the
/// selected revision has no such stack.
async fn members<S: AuthorityStore>(state: &AppState<S>, name: &str) -> Option<Markup> {
    let cur = state.current()?;
    let stack = cur.topology.stacks.get(name)?;
    let fleet = crate::status::fleet_status(state).await.ok();
    let comps: Vec<_> = fleet
        .as_ref()
        .map(|f| {
            f.report
                .components
                .iter()
                .filter(|c| stack.components.contains(&c.name))
                .collect()
        })
        .unwrap_or_default();
    let runs = runs_touching(state, name);
    Some(html! {
        @if let Some(d) = &stack.description { p { (layout::visible(d)) } }
        h2 { "Members" }
        div.table-wrap { table.stack {
            thead { tr {
                th scope="col" { "Host" } th scope="col" { "Component" } th scope="col" { "Lifecycle" } th scope="col" { "Health" }
                th scope="col" { "Condition" } th scope="col" { "Observability" } th scope="col" { "Runtime" }
            } }
            tbody { @for c in &comps {
                @let h = fleet.as_ref().and_then(|f| f.hosts.iter().find(|h| h.host == c.host));
                (row(c, marks::needs_attention(c), h, true, None))
            } }
        } }
        h2 #operations { "Operations" }
        @if runs.is_empty() { p.muted { "No operation on it from this dashboard since the authority started." } }
        @for r in runs.iter().take(5) { (run_view(r)) }
    })
}

/// The stack's route health now: its readiness probes run by the authority against
/// what its members' agents last reported.
async fn route_health<S: AuthorityStore>(state: &AppState<S>, name: &str) -> Markup {
    let Some(cur) = state.current() else {
        return html! {};
    };
    let Ok(fleet) = crate::status::fleet_status(state).await else {
        return html! { p.notice.bad role="alert" { "Cannot read the fleet's status." } };
    };
    // The authority holds no secret values: a probe that needs one says so.
    let Ok(secrets) = flotilla_exec::secrets::SecretResolver::new(false, None) else {
        return html! {};
    };
    let all = flotilla_exec::observe::stack_routes(&cur.topology, &secrets, &fleet.report).await;
    let now = flotilla_exec::this_process::now_ms();
    match all.into_iter().find(|s| s.name == name) {
        None => html! { p.muted { "Not checked: some members have not been reported yet." } },
        Some(s) => html! {
            p { (marks::health(s.health)) " " span.muted { "(checked by the authority now)" } }
            ul.evidence { @for e in &s.evidence {
                li { span.source { (layout::visible(&e.source)) } " · " span.muted { (layout::age(now - e.at_ms)) " ago" } " — " span.saw { (layout::visible(&e.saw)) } }
            } }
        },
    }
}
