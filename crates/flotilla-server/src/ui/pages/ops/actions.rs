//! Lifecycle actions that show their plan first: `POST /ui/actions/plan` (verb,
//! target) computes the plan on the selected revision ([`crate::controller::propose`])
//! and answers it as the CLI prints it, with the equivalent command lines and an
//! "Apply this plan" button; `POST /ui/actions/apply` (the plan's id) applies exactly
//! that plan ([`crate::controller::confirm`]) and answers the operation, whose
//! progress and outcome the page's live "Operations" section then follows. Both are
//! operators' (the guard checks the CSRF token and the role).

use super::super::super::extract::Acting;
use super::super::super::layout::{self, Tone};
use super::super::super::session::Session;
use crate::controller::command::{equivalent, with_server};
use crate::controller::runs::{Run, RunOutcome};
use crate::controller::{self, Proposed};
use crate::state::AppState;
use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::post;
use axum::{Form, Router};
use flotilla_plan::render::{refusal_lines, PlanLines};
use flotilla_plan::{Action, Operation, Verb};
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The element the plan and the confirmation are shown in (`id`).
pub(crate) const PANEL: &str = "action-panel";

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/actions/plan", post(plan::<S>))
        .route("/ui/actions/apply", post(apply::<S>))
}

/// The form of a plan request.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct PlanForm {
    /// `start`, `stop`, `restart`, `up` or `down`.
    verb: String,
    /// The component or stack.
    target: String,
}

/// The form of a confirmation.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ApplyForm {
    /// The plan's id.
    id: String,
}

/// The operation a verb typed in a face stands for (`up`/`down`: a stack's
/// start/stop).
fn operation(verb: &str, target: &str) -> Option<Operation> {
    let v = match verb {
        "start" | "up" => Verb::Start,
        "stop" | "down" => Verb::Stop,
        "restart" => Verb::Restart,
        _ => return None,
    };
    Some(Operation::new(v, target))
}

async fn plan<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Form(f): Form<PlanForm>,
) -> Response {
    let Some(op) = operation(&f.verb, &f.target) else {
        return fragment(
            html! { p.notice.bad role="alert" { "Unknown action " code { (layout::visible(&f.verb)) } "." } },
        );
    };
    let shown = match controller::propose(&state, &op, &f.verb, &session.who).await {
        Ok(p) => proposed(&state, &session, &p, &f.verb),
        Err(e) => {
            html! { p.notice.bad role="alert" { "Cannot plan: " (layout::visible(&controller::causes(&e))) } }
        }
    };
    fragment(shown)
}

async fn apply<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Acting(session): Acting,
    Form(f): Form<ApplyForm>,
) -> Response {
    match controller::confirm(&state, &f.id, &session.who) {
        // The run itself is shown (and kept current) under Operations, the page's
        // live part: a copy here would stay at "applying".
        Ok(run) => fragment(html! {
            p role="status" data-run=(run.id) { "Sent to be applied exactly as planned (it is refused, changing nothing, if what runs changed since). Whether it was applied or refused, and its progress, follow live under " a href="#operations" { "Operations" } "." }
        }),
        Err(e) => fragment(
            html! { p.notice.bad role="alert" { (layout::visible(&controller::causes(&e))) } },
        ),
    }
}

fn fragment(m: Markup) -> Response {
    Html(m.into_string()).into_response()
}

/// A plan as the CLI prints it: its lines, each step's line marked by its action.
pub(crate) fn plan_text(lines: &PlanLines) -> Markup {
    html! {
        pre.plan {
            (lines.title) "\n" span.muted { (lines.digests) } "\n"
            @if let Some(n) = &lines.nothing_to_do { (n) "\n" }
            @for w in &lines.waves {
                b { (w.title) } "\n"
                @for s in &w.steps {
                    span class=(step_class(s.action)) { (layout::visible(&s.text)) } "\n"
                }
            }
            @if let Some(t) = &lines.then { (layout::visible(t)) "\n" }
            @if !lines.impact.is_empty() {
                b { "impact" } "\n"
                @for l in &lines.impact { (layout::visible(l)) "\n" }
            }
            @if let Some(c) = &lines.cleanup { (layout::visible(c)) "\n" }
        }
    }
}

fn step_class(a: Action) -> &'static str {
    match a {
        Action::Start | Action::Restart => "step step-change",
        Action::Stop => "step step-stop",
        _ => "step step-none",
    }
}

/// What planning gave, shown: the plan, its command lines, and for an operator
/// the button that applies it.
fn proposed<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    p: &Proposed,
    typed: &str,
) -> Markup {
    let server = &state.settings.public_url;
    match p {
        Proposed::Plan(p) => {
            let eq = equivalent(&p.plan.operation, &p.typed, server, &p.revision);
            html! {
                section.plan-panel aria-labelledby="plan-title" {
                    h2 #plan-title { "Plan: " (layout::visible(&p.plan.operation.typed_as(&p.typed))) }
                    (plan_text(&PlanLines::of(&p.plan)))
                    (layout::command(&eq.run))
                    div.cmd {
                        span.label { "Exactly this plan, reviewed then applied" }
                        code { (eq.exact) }
                        button type="button" data-copy=(eq.exact) aria-label="Copy the command" { "Copy" }
                    }
                    p.muted { (eq.note) }
                    p.muted {
                        "Planned on revision " code { (layout::short_digest(&p.revision)) }
                        " for " (layout::visible(&p.by)) ". Applying it checks first that the revision and what runs are still what it was planned from; if not, it is refused as stale and nothing changes."
                    }
                    @if session.may_act() {
                        div.actions {
                            @if p.plan.is_noop() {
                                p { "Nothing to do: everything is already in the requested state." }
                            } @else {
                                button.primary type="button" hx-post="/ui/actions/apply"
                                    hx-vals=(serde_json::json!({ "id": p.id }).to_string())
                                    hx-target=(format!("#{PANEL}"))
                                    hx-indicator="#apply-wait" hx-disabled-elt="this" { "Apply this plan" }
                                span #apply-wait .htmx-indicator role="status" { " Applying…" }
                            }
                            " "
                            button type="button" data-dismiss=(PANEL) { "Cancel" }
                        }
                    }
                }
            }
        }
        Proposed::NotDriven { plan, outside } => html! {
            section.plan-panel aria-labelledby="plan-title" {
                h2 #plan-title { "Plan: " (layout::visible(&plan.operation.typed_as(typed))) }
                (plan_text(&PlanLines::of(plan)))
                div.notice.bad role="alert" {
                    p { "Not applied from here: the authority drives components on agent hosts only, and this plan changes:" }
                    ul { @for (c, h, t) in outside { li { code { (layout::visible(c)) } " on host " code { (layout::visible(h)) } " (" (t) ")" } } }
                    p { "Run it from a terminal that reaches those hosts:" }
                }
                (layout::command(&plan.operation.typed_as(typed)))
            }
        },
        Proposed::Refused(r) => html! {
            section.plan-panel aria-labelledby="plan-title" {
                h2 #plan-title { "Refused" }
                div.notice.bad role="alert" {
                    pre.plan { @for l in refusal_lines(r, typed) { (layout::visible(&l)) "\n" } }
                }
                (layout::command(&with_server(&r.operation.typed_as(typed), server)))
                div.actions { button type="button" data-dismiss=(PANEL) { "Close" } }
            }
        },
    }
}

/// An operation the controller applied: what, by whom, its progress lines and how
/// it ended.
pub(crate) fn run_view(run: &Run) -> Markup {
    let p = &run.proposal;
    let outcome = run.outcome();
    let lines = run.lines();
    html! {
        article.run data-run=(run.id) {
            h3 {
                (layout::visible(&p.plan.operation.typed_as(&p.typed)))
                " "
                @match &outcome {
                    None => (layout::mark(Tone::Warn, "applying")),
                    Some(RunOutcome::Applied { succeeded: true, operation, .. }) => (layout::mark(Tone::Good, &format!("done ({operation})"))),
                    Some(RunOutcome::Applied { operation, .. }) => (layout::mark(Tone::Bad, &format!("failed ({operation})"))),
                    Some(RunOutcome::Refused(_)) => (layout::mark(Tone::Bad, "refused")),
                    Some(RunOutcome::Failed(_)) => (layout::mark(Tone::Bad, "could not run")),
                }
            }
            p.muted { "Confirmed by " (layout::visible(&run.by)) ", planned on revision " code { (layout::short_digest(&p.revision)) } "." }
            @if !lines.is_empty() {
                pre.plan { @for l in &lines { (layout::visible(l)) "\n" } }
            }
            @match &outcome {
                Some(RunOutcome::Refused(why)) => p.notice.bad role="alert" { "Refused: " (layout::visible(why)) },
                Some(RunOutcome::Failed(why)) => p.notice.bad role="alert" { (layout::visible(why)) },
                Some(RunOutcome::Applied { summary, operation, .. }) => {
                    @for s in summary { p.notice.bad { (layout::visible(s)) } }
                    // Journaled by the authority's controller (`<authority
                    // dir>/controller/`), not in a CLI's journal: no command reads it
                    // from elsewhere, so none is shown.
                    p.muted { "Journaled by the authority as " code { (layout::visible(operation)) } "." }
                },
                None => {},
            }
        }
    }
}

/// The operations the controller applied that touched `name` (its target, or a step
/// of its plan), newest first.
pub(crate) fn runs_touching<S: AuthorityStore>(state: &AppState<S>, name: &str) -> Vec<Arc<Run>> {
    let Some(ctl) = state.controller.as_ref() else {
        return Vec::new();
    };
    ctl.runs()
        .into_iter()
        .filter(|r| {
            let plan = &r.proposal.plan;
            plan.operation.target == name || plan.steps().any(|s| s.component == name)
        })
        .collect()
}

/// The action buttons for `target` (each `(verb, label)`), for an operator; a note
/// for a viewer. Each opens the plan in the [`PANEL`].
pub(crate) fn buttons(session: &Session, target: &str, verbs: &[(&str, &str)]) -> Markup {
    html! {
        div.actions-bar role="group" aria-label="Actions" {
            @if session.may_act() {
                @for (verb, label) in verbs {
                    button type="button" hx-post="/ui/actions/plan"
                        hx-vals=(serde_json::json!({ "verb": verb, "target": target }).to_string())
                        hx-target=(format!("#{PANEL}"))
                        hx-indicator="#plan-wait" hx-disabled-elt="this"
                        data-verb=(verb) { (label) }
                }
                span #plan-wait .htmx-indicator role="status" { "Planning… (asking the hosts what runs)" }
                span.muted { "Each shows its plan and command first; nothing changes until you apply it." }
            } @else {
                span.muted { "Read-only (viewer role): starting, stopping and restarting are for operators." }
            }
        }
        div id=(PANEL) aria-live="polite" {}
    }
}
