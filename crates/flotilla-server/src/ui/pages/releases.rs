//! Releases and rollouts: `/ui/releases` (every release as published, every
//! rollout with its phase and hosts counted by phase) and `/ui/rollouts/{id}` (the
//! rollout's state machine drawn as steps with the current one marked, its hosts by
//! phase, its events, and approve/pause/resume/abort — the same effect as `POST
//! /v1/rollouts/{id}/{action}`, [`crate::releases::act_on_rollout`] — each with its
//! `flotilla release …` command). Live on [`Topic::Releases`].

use super::super::extract::{Acting, Signed};
use super::super::hub::Topic;
use super::super::layout::{self, short_digest, Nav, Tone};
use super::super::live::Fragment;
use super::super::session::Session;
use super::frame;
use super::text::{visible, when};
use crate::releases::{act_on_rollout, releases_of};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use flotilla_api::links::Link;
use flotilla_exec::this_process::now_ms;
use flotilla_release::rollout::{HostPhase, Phase, Rollout};
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The list's live view.
pub(crate) const LIST_VIEW: &str = "releases";
/// One rollout's live view (`arg` = its id).
pub(crate) const VIEW: &str = "rollout";
const LIST_EVENT: &str = "releases";
const EVENT: &str = "rollout";
const TOPICS: &[Topic] = &[Topic::Releases];
/// A rollout's events the page shows (the newest).
const EVENTS_SHOWN: usize = 200;

/// The actions, in the order their buttons appear.
const ACTIONS: [(&str, &str, &[Phase]); 4] = [
    ("approve", "✓ Approve", &[Phase::AwaitingApproval]),
    ("pause", "❚❚ Pause", &[Phase::InProgress]),
    ("resume", "▶ Resume", &[Phase::Paused]),
    (
        "abort",
        "✗ Abort",
        &[
            Phase::Pending,
            Phase::AwaitingApproval,
            Phase::InProgress,
            Phase::Paused,
        ],
    ),
];

const HOST_PHASES: [HostPhase; 5] = [
    HostPhase::Updating,
    HostPhase::Pending,
    HostPhase::Updated,
    HostPhase::Failed,
    HostPhase::RolledBack,
];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/releases", get(list_page::<S>))
        .route("/ui/rollouts/{id}", get(page::<S>))
        .route("/ui/rollouts/{id}/{action}", post(action_form::<S>))
}

pub(crate) fn list_feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::new(
        LIST_EVENT,
        TOPICS,
        |state, _session| async move { list(&state).await },
    )])
}

pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    let id: u64 = arg?.parse().ok()?;
    Some(vec![Fragment::new(
        EVENT,
        TOPICS,
        move |state, session| async move {
            match rollout_of(&state, id).await {
                Some(r) => details(&r, &session, now_ms()),
                None => html! { p role="alert" { "The authority no longer knows this rollout." } },
            }
        },
    )])
}

async fn rollout_of<S: AuthorityStore>(state: &AppState<S>, id: u64) -> Option<Rollout> {
    state.releases.rollouts.lock().await.get(&id).cloned()
}

fn phase_mark(p: Phase, halted: Option<&str>) -> Markup {
    match (p, halted) {
        (Phase::Succeeded, _) => layout::mark(Tone::Good, "Succeeded"),
        (Phase::Failed, Some(h)) => layout::mark(Tone::Bad, &format!("Failed ({h})")),
        (Phase::Failed, None) => layout::mark(Tone::Bad, "Failed"),
        (Phase::Paused | Phase::AwaitingApproval, _) => layout::mark(Tone::Warn, &p.to_string()),
        (Phase::InProgress | Phase::Pending, _) => layout::mark(Tone::Neutral, &p.to_string()),
    }
}

fn host_phase_mark(p: HostPhase) -> Markup {
    let tone = match p {
        HostPhase::Updated => Tone::Good,
        HostPhase::Failed | HostPhase::RolledBack => Tone::Bad,
        HostPhase::Updating => Tone::Warn,
        HostPhase::Pending => Tone::Neutral,
    };
    layout::mark(tone, &p.to_string())
}

/// How many hosts are in each phase, in words (`2 Updated, 1 Updating`).
fn counts(r: &Rollout) -> String {
    HOST_PHASES
        .iter()
        .filter_map(|p| {
            let n = r.hosts.iter().filter(|h| h.phase == *p).count();
            (n > 0).then(|| format!("{n} {p}"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let releases = match releases_of(state).await {
        Ok(r) => r,
        Err(f) => {
            return html! { div.notice.bad role="alert" { "Cannot read the releases: " (f.message()) } };
        }
    };
    let rollouts: Vec<Rollout> = state
        .releases
        .rollouts
        .lock()
        .await
        .values()
        .rev()
        .cloned()
        .collect();
    let now = now_ms();
    html! {
        h2 { "Rollouts" }
        @if rollouts.is_empty() {
            p.muted { "None yet: " code { "flotilla release rollout NAME VERSION" } " makes one." }
        } @else {
            div.table-wrap {
                table.stack {
                    thead { tr { th { "Rollout" } th { "Release" } th { "Phase" } th { "Hosts" } th { "Created" } } }
                    tbody {
                        @for r in &rollouts {
                            tr data-row data-text=(format!("{} {} {}{}", r.id, r.spec.name.to_lowercase(), r.spec.version.to_lowercase(), if r.rollback_of.is_some() { " rollback" } else { "" })) data-state=(r.phase.to_string().to_lowercase()) {
                                td data-label="Rollout" {
                                    a href=(Link::Rollout(r.id.to_string()).path()) { "#" (r.id) }
                                    @if let Some(of) = r.rollback_of { " " span.rollback data-rollback-of=(of) { (layout::mark(Tone::Warn, &format!("rollback of #{of}"))) } }
                                }
                                td data-label="Release" { (visible(&r.spec.name, 200)) " " (visible(&r.spec.version, 200)) }
                                td data-label="Phase" { (phase_mark(r.phase, r.halted.as_deref())) }
                                td data-label="Hosts" { (counts(r)) }
                                td data-label="Created" { (when(r.created_ms, now)) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Releases" }
        @if releases.is_empty() {
            p.muted { "None yet: " code { "flotilla release publish" } " publishes one." }
        } @else {
            div.table-wrap {
                table.stack {
                    thead { tr { th { "Release" } th { "Serial" } th { "Platforms" } th { "Signed by key" } th { "Expires" } th { "Published" } } }
                    tbody {
                        @for r in &releases {
                            tr data-row data-text=(format!("{} {}", r.name.to_lowercase(), r.version.to_lowercase())) {
                                td data-label="Release" { b { (visible(&r.name, 200)) } " " (visible(&r.version, 200)) }
                                td data-label="Serial" { (r.serial) }
                                td data-label="Platforms" {
                                    @for (i, a) in r.artifacts.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        span title=(a.sha256) { (visible(&a.platform, 100)) " " code { (short_digest(&a.sha256)) } }
                                    }
                                }
                                td data-label="Signed by key" { code { (visible(&r.key_id, 100)) } }
                                td data-label="Expires" { (visible(&r.expires, 100)) }
                                td data-label="Published" { (when(r.created_ms, now)) " by " (visible(&r.published_by, 200)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn list_page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    let since = state.ui.hub.mark();
    let content = list(&state).await;
    let head = html! {
        div.filters { label { "Filter " input type="search" data-filter placeholder="name, version, rollout"; } }
    };
    frame::list_page(
        &session,
        Nav::Releases,
        "Releases and rollouts",
        LIST_VIEW,
        LIST_EVENT,
        &since,
        head,
        content,
    )
}

/// The state machine as steps: awaiting approval → in progress (⇄ paused) →
/// succeeded or failed, the current one marked in text and for assistive
/// technology.
fn steps(r: &Rollout) -> Markup {
    let step = |p: Phase, label: &str| {
        let current = r.phase == p;
        html! {
            li.current[current] aria-current=[current.then_some("step")] {
                @if current { b { "▶ " (label) } " (now)" } @else { (label) }
            }
        }
    };
    html! {
        ol.steps #rollout-steps aria-label="Rollout phases" {
            (step(Phase::AwaitingApproval, "Awaiting approval"))
            (step(Phase::InProgress, "In progress"))
            (step(Phase::Paused, "Paused (resumes to in progress)"))
            (step(Phase::Succeeded, "Succeeded"))
            (step(Phase::Failed, &match &r.halted { Some(h) => format!("Failed: halted {h}"), None => "Failed".into() }))
        }
    }
}

fn actions(r: &Rollout, session: &Session) -> Markup {
    let allowed: Vec<_> = ACTIONS
        .iter()
        .filter(|(_, _, from)| from.contains(&r.phase))
        .collect();
    html! {
        @if allowed.is_empty() {
            p.muted { "It has ended: no action applies. The hosts it changed go back to what they ran before with a rollback (a new rollout, approved like any):" }
            (layout::command(&format!("flotilla release rollback {}", r.id)))
        } @else if session.may_act() {
            div.actions #rollout-actions {
                @for (action, label, _) in &allowed {
                    form method="post" action=(format!("{}/{action}", Link::Rollout(r.id.to_string()).path())) {
                        input type="hidden" name="csrf" value=(session.csrf);
                        button type="submit" data-action=(action) { (label) }
                    }
                    (layout::command(&format!("flotilla release {action} {}", r.id)))
                }
            }
        } @else {
            p.muted { "Read-only: an operator acts." }
        }
    }
}

/// Everything below the title.
fn details(r: &Rollout, session: &Session, now: i64) -> Markup {
    let skip = r.events.len().saturating_sub(EVENTS_SHOWN);
    html! {
        @if let Some(of) = r.rollback_of {
            p #rollback-of {
                (layout::mark(Tone::Warn, "Rollback")) " of "
                a href=(Link::Rollout(of.to_string()).path()) { "rollout " (of) }
                ": each host goes back to the release it ran before that rollout changed it."
            }
        }
        p.lead {
            "Release " b { (visible(&r.spec.name, 200)) " " (visible(&r.spec.version, 200)) } " (serial " (r.spec.serial) ")"
            " to " (r.hosts.len()) " host(s); created " (when(r.created_ms, now))
            @if let Some(a) = r.approved_ms { ", approved " (when(a, now)) }
            @if let Some(f) = r.finished_ms { ", finished " (when(f, now)) }
            "."
        }
        p #rollout-phase { "Phase: " (phase_mark(r.phase, r.halted.as_deref())) }
        (steps(r))
        (actions(r, session))
        h2 { "Hosts by phase" }
        @for p in HOST_PHASES {
            @let hosts: Vec<_> = r.hosts.iter().filter(|h| h.phase == p).collect();
            @if !hosts.is_empty() {
                h3 { (host_phase_mark(p)) " (" (hosts.len()) ")" }
                ul.hosts data-phase=(p.to_string()) {
                    @for h in hosts {
                        li {
                            a href=(Link::Host(h.host.clone()).path()) { (visible(&h.host, 200)) }
                            " " span.muted { (visible(&h.platform, 100)) }
                            @if h.canary { " " (layout::mark(Tone::Neutral, "canary")) }
                            @if let Some(t) = &h.target { " → " (visible(&t.version, 200)) " " code { (short_digest(&t.sha256)) } }
                            @if let Some(reason) = &h.reason { " — " b { (reason.to_string()) } }
                            @if !h.detail.is_empty() { ": " (visible(&h.detail, 2048)) }
                            @if let Some(t) = h.heard_ms { " · last heard " (when(t, now)) }
                        }
                    }
                }
            }
        }
        h2 { "Settings" }
        dl.facts {
            dt { "Canaries" } dd { (r.spec.canary) }
            dt { "At most in flight" } dd { (r.spec.max_in_flight) }
            dt { "Soak" } dd { (layout::age(r.spec.min_healthy_ms as i64)) }
            dt { "Timeout" } dd { (layout::age(r.spec.timeout_ms as i64)) }
        }
        h2 { "Events" }
        @if skip > 0 { p.muted { (skip) " earlier: " code { "flotilla release status " (r.id) " --json" } } }
        ol.log #rollout-events start=(skip + 1) {
            @for e in &r.events[skip..] { li { (visible(e, 2048)) } }
        }
    }
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    Path(id): Path<String>,
) -> Response {
    render(&state, &session, &id, StatusCode::OK, None).await
}

async fn render<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    id: &str,
    status: StatusCode,
    notice: Option<Markup>,
) -> Response {
    let since = state.ui.hub.mark();
    let found = match id.parse::<u64>() {
        Ok(n) => rollout_of(state, n).await,
        Err(_) => None,
    };
    let Some(r) = found else {
        return layout::not_found(session, Nav::Releases, &format!("rollout `{id}`"));
    };
    let body = html! {
        nav aria-label="Breadcrumb" { a href=(Link::Releases.path()) { "Releases" } " › rollout " (r.id) }
        h1 { "Rollout " (r.id) }
        @if let Some(n) = notice { (n) }
        div #rollout sse-swap=(EVENT) { (details(&r, session, now_ms())) }
    };
    let title = format!("Rollout {}", r.id);
    frame::object_page(
        session,
        Nav::Releases,
        &title,
        (VIEW, Some(id)),
        &since,
        status,
        body,
    )
}

/// `POST /ui/rollouts/{id}/{action}`: the action as the operator; a refusal (the
/// phase does not allow it) is shown on the rollout's page.
async fn action_form<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Path((id, action)): Path<(u64, String)>,
) -> Response {
    match act_on_rollout(&state, id, &action).await {
        Ok(_) => Redirect::to(&Link::Rollout(id.to_string()).path()).into_response(),
        Err(f) => {
            let notice = html! { div.notice.bad role="alert" #action-refused { p { b { "Not done: " } (f.message()) } } };
            render(&state, &session, &id.to_string(), f.0, Some(notice)).await
        }
    }
}
