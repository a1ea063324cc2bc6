//! The web dashboard, served by `flotilla serve` under `/ui` on the API's listener
//! (same TLS). Server-rendered HTML (maud: every interpolated value is escaped;
//! never `PreEscaped` user data), htmx 2 and its SSE extension compiled in
//! ([`assets`]), one event stream per page for live updates ([`events`]).
//!
//! # Files
//! - [`router`] (here): every `/ui` route behind the [`guard`].
//! - [`pages`]: one file per page (`login`, `overview`, `host`, …) and the registry
//!   of live views.
//! - [`extract`]: the extractors [`Signed`] and [`Acting`]; [`session`]: sessions,
//!   the cookie, CSRF tokens; [`guard`]: CSRF and role checks on every
//!   state-changing request, security headers; [`ratelimit`]: sign-in attempts.
//! - [`layout`]: the page shell and shared pieces; [`marks`]: status signals as
//!   text + symbol.
//! - [`hub`]: what changed ([`Topic`]); [`live`]: a page's live [`Fragment`]s;
//!   [`events`]: the SSE stream; [`renders`]: renders shared between streams;
//!   [`watch`]: the authority's wake-ups fed to the hub.
//! - [`links`]: `/v1/ui-links` (sign-in links, `flotilla serve ui-link`);
//!   [`assets`]: static files; [`state`]: what the dashboard keeps in memory.
//!
//! # Adding a page
//! 1. A file `pages/NAME.rs` with
//!    `pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>>`,
//!    declared in `pages/mod.rs` and merged in `pages::routes` (one line each).
//! 2. A handler takes `State(state): State<Arc<AppState<S>>>` and [`Signed`]`(session)`
//!    (pages, reads) or [`Acting`]`(session)` (POST/PUT/DELETE actions), and answers
//!    `Html(layout::page(&session, Nav::X, "Title", live, body).into_string())`.
//!    Read data through the same functions the `/v1` routes use (e.g.
//!    `crate::status::fleet_status`), never by copying them.
//! 3. Unknown objects: `layout::not_found(&session, Nav::X, "host `h9`")` (404).
//! 4. Actions: a form or button with `hx-post="/ui/…"` (htmx sends the CSRF header
//!    from `<body hx-headers>`), or a plain `<form method="post">` with
//!    `input type="hidden" name="csrf" value=(session.csrf)`. The [`guard`] refuses
//!    (403) one without a valid token and any viewer's. Hide buttons when
//!    `!session.may_act()`. Show what the action is as a command with
//!    `layout::command("flotilla start llama")`.
//! 5. Status is `layout::mark(Tone, text)` or a [`marks`] function: text and a
//!    symbol, never colour alone. Tables that hold many columns get
//!    `class="stack"` inside `div.table-wrap` (stacked rows at ≤ 700 px); rows a
//!    filter applies to carry `data-row`, `data-text` (lowercase words) and
//!    `data-state` (space-separated words); the filter inputs are an
//!    `input[data-filter]` (`/` focuses it) and a `select[data-filter-state]`.
//!    A log box that follows its end: `pre.log[data-follow]`.
//!
//! # Live updates
//! A page with live parts:
//! 1. Takes `let since = state.ui.hub.mark();` *before* rendering.
//! 2. Renders each live part inside `div sse-swap="EVENT" { … }` with the same
//!    function its fragment uses.
//! 3. Passes `Some(&live::stream_url(VIEW, arg, &since))` to `layout::page`.
//! 4. Declares `pub(crate) const VIEW: &str` and `pub(crate) fn feed<S>(arg:
//!    Option<&str>) -> Option<Vec<Fragment<S>>>` returning
//!    `Fragment::new("EVENT", &[Topic::…], |state, session| async move { … })`, and
//!    adds `VIEW => NAME::feed::<S>(arg),` to `pages::feed`.
//!
//! Code that changes what a topic covers calls `state.ui.hub.changed(Topic::X)`
//! after it committed. Already wired: reports (`revisions::report`), the selection
//! and releases (`watch`), a clock tick for ages ([`Topic::Fleet`] every 5 s),
//! session events and documents (`sessions::records`), questions opened, answered
//! and used (`sessions::questions`, `handlers`, `push`), alerts received
//! (`sessions::alerts`). Each stream re-renders only
//! the fragments whose topics changed, coalesced, at most one render per change
//! burst, and drops a client that stops reading.
//!
//! # Browser tests
//! `crates/flotilla-cli/tests/dashboard.rs` starts a real authority and agent and
//! drives Debian's Chromium through chromedriver (`tests/common/browser.rs`:
//! `Browser::start()`, `sign_in`, `goto`, `wait_text`, `wait_for`, `screenshot`).
//! A test signs in (`browser.sign_in(&authority.url, &credential)`), opens a page,
//! and waits on what a person would see, with deadlines.

pub mod assets;
pub mod escape;
pub mod events;
pub mod extract;
pub mod guard;
pub mod hub;
pub mod layout;
pub mod links;
pub mod live;
pub mod marks;
pub mod pages;
pub mod ratelimit;
pub mod renders;
pub mod session;
pub mod state;
pub mod watch;

pub use extract::{Acting, Signed};
pub use hub::Topic;
pub use live::Fragment;

use crate::state::AppState;
use axum::routing::get;
use axum::Router;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;

/// Every `/ui` route (pages, assets, the event stream) behind the [`guard`], and
/// `/v1/ui-links`; merged into [`crate::server::router`].
///
/// Pages and assets are gzip-compressed when the client accepts it (RFC 9110
/// `Accept-Encoding`); the event stream (`text/event-stream`) never is, as an
/// encoder would hold events back until its buffer fills.
pub fn router<S: AuthorityStore>(state: Arc<AppState<S>>) -> Router<Arc<AppState<S>>> {
    Router::new()
        .route("/ui/assets/{file}", get(assets::serve))
        .merge(pages::routes::<S>())
        .layer(compression())
        .route("/ui/events", get(events::events::<S>))
        .layer(axum::middleware::from_fn_with_state(
            state,
            guard::guard::<S>,
        ))
        .merge(links::routes::<S>())
}

/// Gzip for bodies over 1 KiB that are not event streams or images.
fn compression() -> CompressionLayer<impl Predicate> {
    let predicate = SizeAbove::new(1024)
        .and(NotForContentType::const_new("text/event-stream"))
        .and(NotForContentType::IMAGES);
    CompressionLayer::new().gzip(true).compress_when(predicate)
}
