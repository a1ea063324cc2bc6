//! Alerts received: `/ui/alerts`, every Alertmanager alert that opened a session
//! ([`crate::sessions::alerts::received`]), with its state (firing or resolved), its
//! labels and annotations (as text), when it started and was received, and the
//! session it opened. Live on [`Topic::Alerts`].

use super::super::extract::Signed;
use super::super::hub::Topic;
use super::super::layout::{self, Nav, Tone};
use super::super::live::Fragment;
use super::frame;
use super::text::{visible, when};
use crate::sessions::alerts::received;
use crate::state::AppState;
use axum::extract::State;
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::AuthorityStore;
use maud::{html, Markup};
use std::sync::Arc;

/// The live view.
pub(crate) const VIEW: &str = "alerts";
const EVENT: &str = "alerts";
const TOPICS: &[Topic] = &[Topic::Alerts];

pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new().route("/ui/alerts", get(page::<S>))
}

pub(crate) fn feed<S: AuthorityStore>(_arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    Some(vec![Fragment::new(
        EVENT,
        TOPICS,
        |state, _session| async move { list(&state).await },
    )])
}

async fn list<S: AuthorityStore>(state: &AppState<S>) -> Markup {
    let alerts = match received(state).await {
        Ok(a) => a,
        Err(f) => {
            return html! { div.notice.bad role="alert" { "Cannot read the alerts: " (f.message()) } };
        }
    };
    let now = now_ms();
    html! {
        @if alerts.is_empty() {
            p.muted { "No alert has opened a session yet (Alertmanager posts to " code { "/v1/alerts/alertmanager" } ")." }
        } @else {
            div.table-wrap {
                table.stack #alerts-table {
                    thead { tr { th { "Alert" } th { "State" } th { "Labels" } th { "Started" } th { "Received" } th { "Session" } } }
                    tbody {
                        @for a in &alerts {
                            @let name = a.labels.get("alertname").map(String::as_str).unwrap_or("(no alertname)");
                            tr data-row data-text=(a.labels.values().map(|v| v.to_lowercase()).collect::<Vec<_>>().join(" ")) data-state=(a.status) {
                                td data-label="Alert" {
                                    b { (visible(name, 200)) }
                                    @if let Some(s) = a.annotations.get("summary") { br; span.muted { (visible(s, 1024)) } }
                                }
                                td data-label="State" {
                                    @if a.status == "firing" { (layout::mark(Tone::Bad, "firing")) }
                                    @else { (layout::mark(Tone::Good, "resolved")) }
                                    @if let Some(r) = a.resolved_ms { " " (when(r, now)) }
                                }
                                td data-label="Labels" {
                                    ul.labels {
                                        @for (k, v) in &a.labels { li { code { (visible(k, 200)) "=" (visible(v, 1024)) } } }
                                    }
                                }
                                td data-label="Started" { (visible(&a.starts_at, 100)) }
                                td data-label="Received" { (when(a.received_ms, now)) }
                                td data-label="Session" { a href=(Link::Session(a.session).path()) { "session " (a.session) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

async fn page<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
) -> Response {
    let since = state.ui.hub.mark();
    let content = list(&state).await;
    let head = html! {
        div.filters {
            label { "Filter " input type="search" data-filter placeholder="label values"; }
            label { "State " select data-filter-state {
                option value="" { "any" } option value="firing" { "firing" } option value="resolved" { "resolved" }
            } }
        }
    };
    frame::list_page(
        &session,
        Nav::Alerts,
        "Alerts",
        VIEW,
        EVENT,
        &since,
        head,
        content,
    )
}
