//! This section's own script and style sheet, compiled in and served from `/ui/ops/`
//! (the Content-Security-Policy allows this origin's files only): the log's
//! following/paused state and its "Follow the end" button, a plan's Cancel, and the
//! look of plans, operations, evidence and the log.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use maud::{html, Markup};

const JS: &str = include_str!("ops.js");
const CSS: &str = include_str!("ops.css");

pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route(
            "/ui/ops/ops.js",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    JS,
                )
                    .into_response()
            }),
        )
        .route(
            "/ui/ops/ops.css",
            get(|| async {
                (
                    [
                        (header::CONTENT_TYPE, "text/css; charset=utf-8"),
                        (header::CACHE_CONTROL, "no-cache"),
                    ],
                    CSS,
                )
                    .into_response()
            }),
        )
}

/// The tags that load them (in the page's body).
pub(crate) fn head() -> Markup {
    html! {
        link rel="stylesheet" href="/ui/ops/ops.css";
        script src="/ui/ops/ops.js" defer {}
    }
}
