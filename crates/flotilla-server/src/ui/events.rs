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
//! change burst, not one each. The session is re-checked at every keep-alive: a signed-out or
//! revoked session's stream ends.

use super::extract::{still_valid, Signed};
use super::hub::Topic;
use super::live::Fragment;
use super::pages;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flotilla_store::authority::AuthorityStore;
use std::collections::HashSet;
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
    let view = (q.view, q.arg);
    let need = state.ui.hub.seq();
    tokio::spawn(run(
        state, session, view, feed, wanted, pending, need, changes, tx,
    ));
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
    let mut recheck = tokio::time::interval(KEEP_ALIVE);
    recheck.tick().await;
    let mut last_render: Option<tokio::time::Instant> = None;
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
                let (seq, html) = match state.ui.renders.get(&key, need) {
                    Some(r) => r,
                    None => {
                        let seq = state.ui.hub.seq();
                        let h: Arc<str> = f
                            .render(state.clone(), session.clone())
                            .await
                            .into_string()
                            .into();
                        state.ui.renders.put(key, seq, h.clone());
                        (seq, h)
                    }
                };
                batch.push((&f.event, seq, html));
            }
            let id = state
                .ui
                .hub
                .id(batch.iter().map(|b| b.1).min().unwrap_or(need));
            for (event, _, html) in batch {
                let ev = Event::default().event(event).id(&id).data(&*html);
                if tx.try_send(ev).is_err() {
                    // Full (not reading) or gone: drop it.
                    return;
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
