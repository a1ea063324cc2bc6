//! `GET /ui/events?view=V&arg=A&since=ID`: a page's one multiplexed Server-Sent
//! Events stream (WHATWG HTML §9.2). Each event is an HTML fragment named by what it
//! replaces (`event: <name>`), with `id: <boot>-<seq>`; a client that reconnects
//! with `Last-Event-ID` (or a first connection with `since`) gets the fragments
//! whose topics changed since, or all of them when the id is unknown. Keep-alive
//! comments every [`KEEP_ALIVE`]; `X-Accel-Buffering: no` and `Cache-Control:
//! no-cache` so proxies pass events at once.
//!
//! Bounded per client: events wait in a channel of [`CLIENT_BUFFER`]; a client that
//! does not read fills it and is dropped. Changes arriving while a stream renders
//! are coalesced (at most one render per [`MIN_INTERVAL`]); a stream that falls
//! behind the hub's backlog re-renders all of its fragments. A render is shared by
//! every stream of the same view, argument and role that needs no newer one
//! ([`super::renders::Renders`]): many open overviews cost about one render per
//! change burst, not one each. A fragment made of parts ([`super::live::Parts`], the
//! overview's rows) is sent whole once; after that, while its layout holds, only
//! the parts that changed since what this stream sent, as out-of-band swaps in a
//! `<event>-parts` event. A page's [`super::live::Tail`]s (a component's log) send on
//! the same stream and stop when it ends. The session is re-checked at every
//! keep-alive: a signed-out or revoked session's stream ends.

use super::extract::{still_valid, Signed};
use super::hub::Topic;
use super::live::{out_of_band, parts_event, Fragment, Rendered};
use super::pages;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flotilla_store::authority::AuthorityStore;
use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// How often an idle stream sends a keep-alive comment (and re-checks its session).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Events a client may leave unread before it is dropped.
pub const CLIENT_BUFFER: usize = 32;

/// How long a stream waits after a change for more to arrive before rendering.
const COALESCE: Duration = Duration::from_millis(50);

/// The shortest time between two renders of one stream.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);

/// The stream's query.
#[derive(Debug, serde::Deserialize)]
pub struct StreamQuery {
    /// The page (`overview`, `host`…).
    pub view: String,
    /// Its argument (a host's name…).
    pub arg: Option<String>,
    /// The event id the page was rendered at.
    pub since: Option<String>,
}

/// The handler.
pub async fn events<S: AuthorityStore>(
    State(state): State<Arc<AppState<S>>>,
    Signed(session): Signed,
    headers: HeaderMap,
    Query(q): Query<StreamQuery>,
) -> Response {
    let Some(feed) = pages::feed::<S>(&q.view, q.arg.as_deref()) else {
        return (StatusCode::NOT_FOUND, "no such live view").into_response();
    };
    // Subscribe first: a change between the two calls is then seen twice, never
    // missed.
    let changes = state.ui.hub.subscribe();
    let since = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or(q.since.as_deref());
    let wanted: HashSet<Topic> = feed.iter().flat_map(|f| f.topics.iter().copied()).collect();
    let pending: HashSet<Topic> = state
        .ui
        .hub
        .changed_since(since)
        .into_iter()
        .filter(|t| wanted.contains(t))
        .collect();
    let (tx, rx) = mpsc::channel::<Event>(CLIENT_BUFFER);
    // The tails run while the stream does (aborted when `run` returns).
    let tails = Tails(
        pages::tails::<S>(&q.view, q.arg.as_deref())
            .iter()
            .map(|t| t.start(state.clone(), session.clone(), tx.clone()))
            .collect(),
    );
    let view = (q.view, q.arg);
    let need = state.ui.hub.seq();
    tokio::spawn(async move {
        run(
            state, session, view, feed, wanted, pending, need, changes, tx,
        )
        .await;
        drop(tails);
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    let h = resp.headers_mut();
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// A stream's running tails, stopped when dropped.
struct Tails(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tails {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run<S: AuthorityStore>(
    state: Arc<AppState<S>>,
    session: Arc<super::session::Session>,
    (view, arg): (String, Option<String>),
    feed: Vec<Fragment<S>>,
    wanted: HashSet<Topic>,
    mut pending: HashSet<Topic>,
    mut need: u64,
    mut changes: broadcast::Receiver<(u64, Topic)>,
    tx: mpsc::Sender<Event>,
) {
    let _open = crate::metrics::Held::new(&state.metrics.ui_streams);
    let mut recheck = tokio::time::interval(KEEP_ALIVE);
    recheck.tick().await;
    let mut last_render: Option<tokio::time::Instant> = None;
    let mut sent: HashMap<String, Sent> = HashMap::new();
    loop {
        if !pending.is_empty() {
            let due = last_render.map_or(COALESCE, |t| {
                (t + MIN_INTERVAL).saturating_duration_since(tokio::time::Instant::now())
            });
            tokio::time::sleep(due.max(COALESCE)).await;
            loop {
                match changes.try_recv() {
                    Ok((seq, t)) if wanted.contains(&t) => {
                        pending.insert(t);
                        need = need.max(seq);
                    }
                    Ok(_) => {}
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        pending.extend(&wanted);
                        need = state.ui.hub.seq();
                    }
                    Err(broadcast::error::TryRecvError::Empty) => break,
                    Err(broadcast::error::TryRecvError::Closed) => return,
                }
            }
            // A render made at `need` or later shows every change seen here; one
            // another stream made is reused. The batch's events carry the oldest
            // render's id, so a client resuming from it misses nothing.
            last_render = Some(tokio::time::Instant::now());
            let mut batch = Vec::new();
            for f in feed
                .iter()
                .filter(|f| f.topics.iter().any(|t| pending.contains(t)))
            {
                let key = (
                    view.clone(),
                    arg.clone(),
                    f.event.clone(),
                    session.may_act(),
                );
                let (seq, r) = state
                    .ui
                    .renders
                    .get_or_render(
                        key,
                        need,
                        state.ui.hub.seq(),
                        f.render(state.clone(), session.clone()),
                    )
                    .await;
                if let Some((event, data)) = what_to_send(&mut sent, &f.event, &r) {
                    batch.push((event, seq, data));
                }
            }
            let id = state
                .ui
                .hub
                .id(batch.iter().map(|b| b.1).min().unwrap_or(need));
            for (event, _, data) in batch {
                let ev = Event::default().event(event).id(&id).data(&*data);
                match tx.try_send(ev) {
                    Ok(()) => {}
                    // Not reading: drop it.
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        state.metrics.ui_streams_dropped.inc();
                        return;
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => return,
                }
            }
            pending.clear();
        }
        tokio::select! {
            r = changes.recv() => match r {
                Ok((seq, t)) => if wanted.contains(&t) {
                    pending.insert(t);
                    need = need.max(seq);
                },
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    pending.extend(&wanted);
                    need = state.ui.hub.seq();
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = recheck.tick() => {
                if !still_valid(&state, &session).await {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

/// What a stream last sent of a fragment made of parts: its layout and the hash of
/// each part, in order (the same layout has the same parts in the same order).
struct Sent {
    layout: u64,
    hashes: Vec<u64>,
}

/// The event to send for render `r` of fragment `event`, given what the stream sent
/// before (updated): the whole fragment, or (same layout) its changed parts out of
/// band, or nothing when no part changed.
fn what_to_send(
    sent: &mut HashMap<String, Sent>,
    event: &str,
    r: &Rendered,
) -> Option<(String, Arc<str>)> {
    let Some(parts) = &r.parts else {
        return Some((event.to_owned(), r.html.clone()));
    };
    let before = sent
        .get_mut(event)
        .filter(|s| s.layout == parts.layout && s.hashes.len() == parts.pieces.len());
    match before {
        Some(before) => {
            let mut data = String::new();
            for (piece, hash) in parts.pieces.iter().zip(before.hashes.iter_mut()) {
                if *hash != piece.hash {
                    *hash = piece.hash;
                    data.push_str(&out_of_band(&piece.html));
                }
            }
            (!data.is_empty()).then(|| (parts_event(event), data.into()))
        }
        None => {
            sent.insert(
                event.to_owned(),
                Sent {
                    layout: parts.layout,
                    hashes: parts.pieces.iter().map(|p| p.hash).collect(),
                },
            );
            Some((event.to_owned(), r.html.clone()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::renders::{Parts, Piece};
    use super::*;

    fn render(layout: u64, pieces: &[(&str, &str)]) -> Rendered {
        Rendered {
            html: pieces.iter().map(|p| p.1).collect::<String>().into(),
            parts: Some(Arc::new(Parts {
                layout,
                pieces: pieces
                    .iter()
                    .map(|(_, h)| Piece::new(h.to_string()))
                    .collect(),
            })),
        }
    }

    #[test]
    fn a_stream_sends_the_whole_once_then_only_the_parts_that_changed() {
        let mut sent = HashMap::new();
        let first = render(1, &[("a", "<tr id=a>1</tr>"), ("b", "<tr id=b>1</tr>")]);
        let (ev, data) = what_to_send(&mut sent, "overview", &first).unwrap();
        assert_eq!((ev.as_str(), &*data), ("overview", &*first.html));
        // Nothing changed: nothing sent.
        assert!(what_to_send(&mut sent, "overview", &first).is_none());
        // One part changed: only it, out of band.
        let second = render(1, &[("a", "<tr id=a>1</tr>"), ("b", "<tr id=b>2</tr>")]);
        let (ev, data) = what_to_send(&mut sent, "overview", &second).unwrap();
        assert_eq!(ev, "overview-parts");
        assert_eq!(
            &*data,
            "<template><tr hx-swap-oob=\"true\" id=b>2</tr></template>"
        );
        // Another layout (a row added, the order changed): the whole again.
        let third = render(2, &[("b", "<tr id=b>2</tr>"), ("a", "<tr id=a>1</tr>")]);
        let (ev, _) = what_to_send(&mut sent, "overview", &third).unwrap();
        assert_eq!(ev, "overview");
        // A fragment without parts is always sent whole.
        let plain = Rendered::from(maud::html! { p { "x" } });
        let (ev, data) = what_to_send(&mut sent, "log", &plain).unwrap();
        assert_eq!((ev.as_str(), &*data), ("log", "<p>x</p>"));
    }
}
