//! The fleet overview, `/ui/?page=N&q=TEXT&state=WORD`: counts (hosts, components,
//! running, needing attention), what needs attention first, and the components of
//! every host with their lifecycle, health, condition, observability with its age
//! and runtime identity, [`PAGE_ROWS`] to a page, by host then name. `q` keeps the
//! rows whose "host name" holds TEXT (case-insensitive) and `state` those with the
//! state word (one of [`STATES`]), across the whole fleet; the same filter also
//! narrows the page's rows in place as it is typed. The same data as
//! `GET /v1/status` ([`crate::status::fleet_status`]), kept live on [`Topic::Fleet`],
//! [`Topic::Selection`] and [`Topic::Releases`].

use super::super::extract::Signed;
use super::super::hub::Topic;
use super::super::layout::{self, Nav};
use super::super::live::{parts_sink, stream_url, Fragment, Parts, Rendered};
use super::super::marks;
use super::super::session::Session;
use crate::api::{FleetStatus, HostStateDto};
use crate::state::AppState;
use axum::extract::{RawQuery, State};
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

/// The stream of the overview whose query is `arg` ([`View::arg`]).
pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    let view = Arc::new(View::parse(arg.unwrap_or("")));
    Some(vec![Fragment::with_parts(
        EVENT,
        TOPICS,
        move |state, session| {
            let view = view.clone();
            async move { fragment(&state, &session, &view).await }
        },
    )])
}

/// How many rows a page of the overview holds.
pub(crate) const PAGE_ROWS: usize = 500;

/// What the overview shows: one page of the rows that pass a filter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct View {
    /// The page, from 1 (one past the last shows the last).
    pub page: usize,
    /// Text a row's "host name" holds, lower case; empty: any.
    pub q: String,
    /// A word of the row's state ([`STATES`]); empty: any.
    pub state: String,
}

impl View {
    /// From a query string (`page=2&q=web&state=failed`, form-urlencoded); what
    /// does not parse is left at its default (page 1, no filter).
    pub fn parse(query: &str) -> View {
        let mut v = View {
            page: 1,
            ..View::default()
        };
        for (k, val) in url::form_urlencoded::parse(query.as_bytes()) {
            match &*k {
                "page" => v.page = val.trim().parse().unwrap_or(1).max(1),
                "q" => v.q = val.trim().to_lowercase(),
                "state" if STATES.contains(&val.trim()) => v.state = val.trim().to_owned(),
                _ => {}
            }
        }
        v
    }

    /// The canonical query (parameters at their default left out), or `None` for
    /// the first page unfiltered: the event stream's argument and the key under
    /// which renders are shared.
    pub fn arg(&self) -> Option<String> {
        self.query(self.page)
    }

    /// The query of page `page` of the same filter.
    fn query(&self, page: usize) -> Option<String> {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if page > 1 {
            q.append_pair("page", &page.to_string());
        }
        if !self.q.is_empty() {
            q.append_pair("q", &self.q);
        }
        if !self.state.is_empty() {
            q.append_pair("state", &self.state);
        }
        let q = q.finish();
        (!q.is_empty()).then_some(q)
    }

    /// The URL of page `page` of the same filter.
    fn url(&self, page: usize) -> String {
        match self.query(page) {
            Some(q) => format!("{}?{q}", Link::Overview.path()),
            None => Link::Overview.path(),
        }
    }

    fn filtered(&self) -> bool {
        !self.q.is_empty() || !self.state.is_empty()
    }

    /// Whether row `words`/`text` (its `data-state` words and `data-text`) passes.
    fn passes(&self, words: &str, text: &str) -> bool {
        (self.q.is_empty() || text.contains(&self.q))
            && (self.state.is_empty() || words.split(' ').any(|w| w == self.state))
    }
}

/// The states the filter offers (each a word of a row's `data-state`).
pub(crate) const STATES: [&str; 8] = [
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
    RawQuery(query): RawQuery,
) -> Response {
    let view = View::parse(query.as_deref().unwrap_or(""));
    let arg = view.arg();
    // The render streams share, when nothing changed since it was made.
    let seq = state.ui.hub.seq();
    let since = state.ui.hub.id(seq);
    let key = (
        VIEW.to_owned(),
        arg.clone(),
        EVENT.to_owned(),
        session.may_act(),
    );
    let (_, content) = state
        .ui
        .renders
        .get_or_render(key, seq, seq, fragment(&state, &session, &view))
        .await;
    // The filter narrows this page's rows as it is typed; submitted (Enter), it
    // filters the whole fleet on the authority.
    let body = html! {
        h1 { "Fleet overview" }
        form.filters role="search" method="get" action=(Link::Overview.path()) {
            label { span { "Filter " kbd { "/" } } input type="search" name="q" value=(view.q) data-filter placeholder="host or component" aria-label="Filter by host or component"; }
            label { "State" select name="state" data-filter-state aria-label="Filter by state" {
                option value="" { "all" }
                @for s in STATES { option value=(s) selected[view.state == s] { (s) } }
            } }
            button type="submit" { "Filter all pages" }
            @if view.filtered() { a href=(Link::Overview.path()) { "Clear" } }
            span.muted data-filter-count aria-live="polite" {}
        }
        div sse-swap=(EVENT) { (maud::PreEscaped(&*content.html)) }
        (parts_sink(EVENT))
    };
    let live = stream_url(VIEW, arg.as_deref(), &since);
    Html(layout::page(&session, Nav::Overview, "Overview", Some(&live), body).into_string())
        .into_response()
}

/// The counts and the table, now, with its parts: the counts, the selection, the
/// list of what needs attention, the pager, each row of the page and the hosts
/// without components.
pub(crate) async fn fragment<S: AuthorityStore>(
    state: &AppState<S>,
    session: &Session,
    view: &View,
) -> Rendered {
    let _ = session;
    match crate::status::fleet_status(state).await {
        Ok(fleet) => render(&fleet, view),
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

fn render(fleet: &FleetStatus, view: &View) -> Rendered {
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
    // The rows that pass the filter, then the page of them shown.
    let matching: Vec<(usize, bool)> = order
        .iter()
        .map(|i| (*i, marks::needs_attention(&comps[*i])))
        .filter(|(i, attn)| {
            !view.filtered() || view.passes(&state_words(&comps[*i], *attn), &row_text(&comps[*i]))
        })
        .collect();
    let pages = matching.len().div_ceil(PAGE_ROWS).max(1);
    let page = view.page.min(pages);
    let first = (page - 1) * PAGE_ROWS;
    let shown = &matching[first.min(matching.len())..(first + PAGE_ROWS).min(matching.len())];
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
    // What needs attention, above the unfiltered table (a filtered one is its own
    // list).
    let all_attention = View {
        page: 1,
        q: String::new(),
        state: "attention".into(),
    };
    let needs = parts.push(
        html! {
            div #ov-attention {
                @if !needing.is_empty() && !view.filtered() {
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
                        p.muted { "and " (attention - ATTENTION_SHOWN) " more: " a href=(all_attention.url(1)) { "list them all" } "." }
                    }
                }
            }
        },
    );
    let pager = parts.push(pager(view, page, pages, first, shown.len(), matching.len()));
    let mut rows = String::with_capacity(shown.len() * 400);
    for (n, (i, attn)) in shown.iter().enumerate() {
        let c = &comps[*i];
        (c.host.as_str(), c.name.as_str()).hash(&mut layout);
        let id = format!("r{n}");
        let r = parts.push(row(
            c,
            *attn,
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
    shown.is_empty().hash(&mut layout);
    parts.layout = layout.finish();
    let whole = html! {
        (counts)
        (selection)
        (needs)
        @if comps.is_empty() {
            p { "No components yet." }
        } @else {
            (pager)
            @if shown.is_empty() {
                p { "No component matches the filter. " a href=(Link::Overview.path()) { "Show them all" } "." }
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
        }
        (silent)
    };
    Rendered {
        html: whole.into_string().into(),
        parts: Some(std::sync::Arc::new(parts)),
    }
}

/// The line above the table: which rows of how many it shows, and links to the
/// first, previous, next and last pages (`rel` prev/next: the `[` and `]` keys).
fn pager(view: &View, page: usize, pages: usize, first: usize, shown: usize, of: usize) -> Markup {
    html! {
        nav.pager #ov-pager aria-label="Pages" {
            span data-rows=(of) {
                @if of == 0 { "0 components" }
                @else if of == 1 { "1 component" }
                @else { (first + 1) "–" (first + shown) " of " (of) " components" }
                @if view.filtered() { " matching the filter" }
                @if pages > 1 { " · page " (page) " of " (pages) }
            }
            @if pages > 1 {
                @if page > 1 {
                    a href=(view.url(1)) { "First" }
                    a href=(view.url(page - 1)) rel="prev" { "‹ Previous" }
                }
                @if page < pages {
                    a href=(view.url(page + 1)) rel="next" { "Next ›" }
                    a href=(view.url(pages)) { "Last" }
                }
            }
        }
    }
}

/// A row's state words (its `data-state`: what the state filter matches).
fn state_words(c: &ComponentStatus, attention: bool) -> String {
    format!(
        "{}{} {} {} {}",
        if attention { "attention " } else { "" },
        c.lifecycle.as_str(),
        c.health.as_str(),
        c.condition.as_str(),
        c.observability.as_str(),
    )
}

/// A row's text (its `data-text`: what the text filter matches), lower case.
fn row_text(c: &ComponentStatus) -> String {
    format!("{} {}", c.host, c.name).to_lowercase()
}

/// One component's row; `with_host`: a first cell naming (and linking) its host.
pub(crate) fn row(
    c: &ComponentStatus,
    attention: bool,
    host: Option<&HostStateDto>,
    with_host: bool,
    id: Option<&str>,
) -> Markup {
    let state_words = state_words(c, attention);
    let text = row_text(c);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `hosts` hosts × 3 components, running; component 2 of every 10th host
    /// failed.
    fn fleet(hosts: usize) -> FleetStatus {
        let mut comps = Vec::new();
        for h in 0..hosts {
            for c in 1..=3 {
                let failed = h % 10 == 0 && c == 2;
                comps.push(serde_json::json!({
                    "name": format!("h{h:04}-c{c}"), "host": format!("h{h:04}"),
                    "lifecycle": if failed { "failed" } else { "running" }, "desired": "running",
                    "health": if failed { "unknown" } else { "healthy" }, "condition": "ok", "observability": "observed",
                    "ownership": "managed (process)", "started_by": "nobody",
                    "config_identity": { "selected": "0".repeat(64), "running": null },
                    "runtime_identity": null, "evidence": [],
                }));
            }
        }
        serde_json::from_value(serde_json::json!({
            "now_ms": 0, "report_deadline_ms": 45000,
            "hosts": (0..hosts).map(|h| serde_json::json!({
                "host": format!("h{h:04}"), "observability": "observed", "last_report_ms": 0,
            })).collect::<Vec<_>>(),
            "report": { "observed_at_ms": 0, "components": comps, "interrupted": [], "in_progress": [] },
        }))
        .unwrap()
    }

    fn rows(r: &Rendered) -> Vec<String> {
        r.html
            .split("data-text=\"")
            .skip(1)
            .map(|s| {
                s[..s.find('"').unwrap()]
                    .split(' ')
                    .nth(1)
                    .unwrap()
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn the_overview_pages_its_rows_and_keeps_the_counts_of_the_whole_fleet() {
        let f = fleet(400); // 1,200 rows: pages of 500, 500, 200
        let first = render(&f, &View::parse(""));
        let r = rows(&first);
        assert_eq!(r.len(), PAGE_ROWS);
        assert_eq!((r[0].as_str(), r[499].as_str()), ("h0000-c1", "h0166-c2"));
        assert!(first
            .html
            .contains("1–500 of 1200 components · page 1 of 3"));
        assert!(first.html.contains(r#"href="/ui/?page=2" rel="next""#));
        assert!(first
            .html
            .contains(r#"<b data-count="components">1200</b>"#));
        assert!(first.html.contains(r#"<b data-count="attention">40</b>"#));
        let last = render(&f, &View::parse("page=3"));
        assert_eq!(rows(&last).len(), 200);
        assert!(last.html.contains("1001–1200 of 1200"));
        assert!(last.html.contains(r#"href="/ui/?page=2" rel="prev""#));
        assert!(!last.html.contains("rel=\"next\""));
        // Past the end: the last page; nonsense: the first.
        assert_eq!(rows(&render(&f, &View::parse("page=99"))), rows(&last));
        assert_eq!(View::parse("page=x&state=nonsense"), View::parse(""));
        assert_eq!(View::parse("").arg(), None);
    }

    #[test]
    fn the_filter_applies_to_the_whole_fleet_and_pages_keep_it() {
        let f = fleet(400);
        let failed = render(&f, &View::parse("state=failed"));
        let r = rows(&failed);
        assert_eq!(r.len(), 40);
        assert!(r.iter().all(|n| n.ends_with("-c2")), "{r:?}");
        assert!(failed.html.contains("40 components matching the filter"));
        // The attention list is for the unfiltered table only.
        assert!(!failed.html.contains("id=\"attention\""));
        assert!(render(&f, &View::parse(""))
            .html
            .contains("id=\"attention\""));
        let text = View::parse("q=H039");
        assert_eq!(text.arg().as_deref(), Some("q=h039"));
        assert_eq!(rows(&render(&f, &text)).len(), 30);
        let none = render(&f, &View::parse("q=nothing-like-it"));
        assert!(none.html.contains("No component matches the filter"));
        // A filter with pages keeps the filter in its links.
        let c1 = View::parse("q=-c");
        assert!(render(&f, &c1)
            .html
            .contains(r#"href="/ui/?page=2&amp;q=-c""#));
    }
}
