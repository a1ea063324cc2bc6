//! Watches: `?watch=true` answers a chunked stream of newline-delimited JSON events.
//!
//! Copied behaviour (https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes):
//! - from `resourceVersion` R: every change after R, then live ones; R older than the
//!   kept history (see [`super::store::HISTORY`], [`super::FakeKube::compact`]) → one
//!   `ERROR` event holding a 410 `Expired` Status (`too old resource version: R
//!   (oldest)`), then the stream ends;
//! - `resourceVersion` absent or `"0"`: a synthetic `ADDED` per current object, then
//!   live changes;
//! - `allowWatchBookmarks=true`: `BOOKMARK` events whose object has only `kind`,
//!   `apiVersion` and `metadata.resourceVersion` (the last change this watch has
//!   seen); the fake sends one every [`BOOKMARK_INTERVAL`] (the real server about
//!   once a minute);
//! - `timeoutSeconds`: the stream ends after that many seconds (1800 when absent);
//! - label and field selectors filter, and a change that makes an object stop (start)
//!   matching is sent as `DELETED` (`ADDED`), as the watch cache does;
//! - `sendInitialEvents=true` (streaming lists,
//!   https://kubernetes.io/docs/reference/using-api/api-concepts/#streaming-lists)
//!   from no resourceVersion or `"0"` with `allowWatchBookmarks=true`: after the
//!   synthetic `ADDED` events, a `BOOKMARK` annotated
//!   `k8s.io/initial-events-end: "true"`; `resourceVersionMatch` is not checked.
//!   (kube-runtime 5's watcher lists then watches by default and does not send it.)
//!
//! A watcher too slow to keep up with 65 536 changes is cut (the stream ends), and
//! its client watches again as after any end.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::sync::broadcast::error::RecvError;

use super::paths::Query;
use super::selector::Filter;
use super::store::{status_failure, typed, Change, EventType, Res, RESOURCES};
use super::Shared;

/// How often a watch with `allowWatchBookmarks=true` gets a `BOOKMARK`.
pub const BOOKMARK_INTERVAL: Duration = Duration::from_secs(1);

/// The event a watch of `res` in `namespace` with `filter` sends for a change.
fn event_for(
    c: &Change,
    res: Res,
    namespace: Option<&str>,
    filter: &Filter,
) -> Option<(&'static str, Value)> {
    if c.key.res != res || namespace.is_some_and(|ns| ns != c.key.namespace) {
        return None;
    }
    let now = filter.matches(&c.object);
    let kind = match c.kind {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => now.then_some("DELETED"),
        EventType::Modified => {
            let was = c.old.as_ref().is_some_and(|o| filter.matches(o));
            match (was, now) {
                (true, true) => Some("MODIFIED"),
                (false, true) => Some("ADDED"),
                (true, false) => Some("DELETED"),
                (false, false) => None,
            }
        }
    }?;
    Some((kind, c.object.clone()))
}

fn line(kind: &str, object: &Value) -> Vec<u8> {
    let mut v = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    v.push(b'\n');
    v
}

/// Serves a watch.
pub(crate) fn serve(
    shared: Arc<Shared>,
    res: Res,
    namespace: Option<String>,
    q: &Query,
    filter: Filter,
) -> Response {
    let rt = &RESOURCES[res];
    let bookmarks = q.get("allowWatchBookmarks") == Some("true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let mut first: Vec<Vec<u8>> = Vec::new();
    let mut expired = false;
    let (mut rx, start) = {
        let mut s = shared.lock();
        let rx = s.changes.subscribe();
        let from = q
            .get("resourceVersion")
            .filter(|r| !r.is_empty() && *r != "0");
        match from.map(|r| r.parse::<u64>()) {
            None => {
                for (k, o) in s.list(res, namespace.as_deref()) {
                    if filter.matches(o) {
                        first.push(line("ADDED", &typed(k.res, o)));
                    }
                }
                if bookmarks && q.get("sendInitialEvents") == Some("true") {
                    first.push(line(
                        "BOOKMARK",
                        &json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": {
                            "resourceVersion": s.rv.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        }}),
                    ));
                }
            }
            Some(Err(_)) => {
                let st = status_failure(400, "BadRequest", "invalid resource version", None);
                first.push(line("ERROR", &st.body));
                expired = true;
            }
            Some(Ok(r)) if r < s.history_floor => {
                let st = status_failure(
                    410,
                    "Expired",
                    &format!("too old resource version: {r} ({})", s.history_floor + 1),
                    None,
                );
                first.push(line("ERROR", &st.body));
                expired = true;
            }
            Some(Ok(r)) => {
                for c in s.history.iter().filter(|c| c.rv > r) {
                    if let Some((kind, obj)) = event_for(c, res, namespace.as_deref(), &filter) {
                        first.push(line(kind, &obj));
                    }
                }
            }
        }
        let name = rt.group_resource();
        *s.watches_opened.entry(name.clone()).or_default() += 1;
        if !expired {
            *s.watches_open.entry(name).or_default() += 1;
        }
        (rx, s.rv)
    };
    let (mut writer, reader) = tokio::io::duplex(256 * 1024);
    let kind = rt.kind;
    let api_version = rt.api_version();
    let counter = rt.group_resource();
    tokio::spawn(async move {
        for l in first {
            if writer.write_all(&l).await.is_err() {
                break;
            }
        }
        if expired {
            return;
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
        let mut ticker = tokio::time::interval(BOOKMARK_INTERVAL);
        ticker.tick().await;
        let mut last = start;
        loop {
            let out = tokio::select! {
                _ = tokio::time::sleep_until(deadline) => break,
                _ = ticker.tick(), if bookmarks => Some(line("BOOKMARK", &json!({
                    "kind": kind, "apiVersion": api_version,
                    "metadata": {"resourceVersion": last.to_string()},
                }))),
                msg = rx.recv() => match msg {
                    Ok(c) if c.rv <= start => None,
                    Ok(c) => {
                        last = c.rv;
                        event_for(&c, res, namespace.as_deref(), &filter).map(|(k, o)| line(k, &o))
                    }
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => break,
                },
            };
            if let Some(l) = out {
                if writer.write_all(&l).await.is_err() {
                    break;
                }
            }
        }
        let _ = writer.shutdown().await;
        if let Some(n) = shared.lock().watches_open.get_mut(&counter) {
            *n = n.saturating_sub(1);
        }
    });
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Body::from_stream(tokio_util::io::ReaderStream::new(reader)))
        .unwrap_or_default()
}
