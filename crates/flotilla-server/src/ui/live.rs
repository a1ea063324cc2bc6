//! What a page keeps live: its [`Fragment`]s (an SSE event name, the [`Topic`]s
//! that make it stale, and how to render it), its [`Tail`]s (sources of events of
//! their own, like a component's log lines) and the URL of its one event stream
//! ([`stream_url`]). The stream itself is [`super::events`].

use super::hub::Topic;
pub use super::renders::{out_of_band, Parts, Rendered};
use super::session::Session;
use crate::state::AppState;
use maud::Markup;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A rendering in progress.
pub type Rendering = Pin<Box<dyn Future<Output = Rendered> + Send>>;

type RenderFn<S> = dyn Fn(Arc<AppState<S>>, Arc<Session>) -> Rendering + Send + Sync;

/// One part of a page that is re-rendered and sent when one of its topics changes.
/// On the page it is an element with `sse-swap="<event>"` (its content replaced,
/// htmx's default `innerHTML`); the page renders it first with the same function.
/// A fragment with [`Parts`] also has an element with `sse-swap="<event>-parts"`
/// and `hx-swap="none"` ([`Fragment::parts_sink`]) that receives changed parts.
pub struct Fragment<S> {
    /// The SSE event name (and the `sse-swap` value on the page).
    pub event: String,
    /// The topics whose change makes it stale.
    pub topics: &'static [Topic],
    render: Box<RenderFn<S>>,
}

impl<S> Fragment<S> {
    /// A fragment named `event`, stale when one of `topics` changes, rendered by
    /// `render` for a session (so that a viewer's has no action buttons). What it
    /// renders may depend on the session only through `session.may_act()`: one
    /// render is shared by every stream of the same view, argument and role.
    pub fn new<F, Fut>(event: impl Into<String>, topics: &'static [Topic], render: F) -> Self
    where
        F: Fn(Arc<AppState<S>>, Arc<Session>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Markup> + Send + 'static,
    {
        Fragment {
            event: event.into(),
            topics,
            render: Box::new(move |state, session| {
                let rendering = render(state, session);
                Box::pin(async move { Rendered::from(rendering.await) })
            }),
        }
    }

    /// Like [`Fragment::new`], for a fragment whose render gives its [`Parts`].
    pub fn with_parts<F, Fut>(event: impl Into<String>, topics: &'static [Topic], render: F) -> Self
    where
        F: Fn(Arc<AppState<S>>, Arc<Session>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Rendered> + Send + 'static,
    {
        Fragment {
            event: event.into(),
            topics,
            render: Box::new(move |state, session| Box::pin(render(state, session))),
        }
    }

    /// Renders it now.
    pub fn render(&self, state: Arc<AppState<S>>, session: Arc<Session>) -> Rendering {
        (self.render)(state, session)
    }
}

type TailFn<S> = dyn Fn(
        Arc<AppState<S>>,
        Arc<Session>,
        tokio::sync::mpsc::Sender<axum::response::sse::Event>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>>
    + Send
    + Sync;

/// A source of events of its own on a page's stream, beside its fragments: it is
/// started when the stream starts, sends SSE events (without ids: a client resuming
/// the stream starts it afresh) on the stream's channel, and is stopped when the
/// stream ends. A component's log lines ([`super::pages::ops::logs`]) are one.
pub struct Tail<S> {
    run: Box<TailFn<S>>,
}

impl<S> Tail<S> {
    /// A tail run by `run(state, session, sender)`; it should return when a send
    /// fails (the client is gone or not reading).
    pub fn new<F, Fut>(run: F) -> Self
    where
        F: Fn(
                Arc<AppState<S>>,
                Arc<Session>,
                tokio::sync::mpsc::Sender<axum::response::sse::Event>,
            ) -> Fut
            + Send
            + Sync
            + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        Tail {
            run: Box::new(move |state, session, tx| Box::pin(run(state, session, tx))),
        }
    }

    /// Starts it on the stream whose events go to `tx`.
    pub fn start(
        &self,
        state: Arc<AppState<S>>,
        session: Arc<Session>,
        tx: tokio::sync::mpsc::Sender<axum::response::sse::Event>,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn((self.run)(state, session, tx))
    }
}

/// The SSE event that carries the changed parts of fragment `event`.
pub fn parts_event(event: &str) -> String {
    format!("{event}-parts")
}

/// The element that receives fragment `event`'s changed parts (placed anywhere in
/// the page, inside the stream's element).
pub fn parts_sink(event: &str) -> Markup {
    maud::html! { div hidden sse-swap=(parts_event(event)) hx-swap="none" {} }
}

/// The URL of the event stream of page `view` (with its argument, e.g. the host's
/// name), sending what changed after `since` (the page's [`super::hub::Hub::mark`],
/// taken before it rendered).
pub fn stream_url(view: &str, arg: Option<&str>, since: &str) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    q.append_pair("view", view);
    if let Some(a) = arg {
        q.append_pair("arg", a);
    }
    q.append_pair("since", since);
    format!("/ui/events?{}", q.finish())
}
