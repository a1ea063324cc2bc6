//! What a page keeps live: its [`Fragment`]s (an SSE event name, the [`Topic`]s
//! that make it stale, and how to render it) and the URL of its event stream
//! ([`stream_url`]). The stream itself is [`super::events`].

use super::hub::Topic;
use super::session::Session;
use crate::state::AppState;
use maud::{Markup, PreEscaped};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A rendering in progress.
pub type Rendering = Pin<Box<dyn Future<Output = Rendered> + Send>>;

type RenderFn<S> = dyn Fn(Arc<AppState<S>>, Arc<Session>) -> Rendering + Send + Sync;

/// One render of a fragment: its whole HTML and, for a fragment made of parts that
/// change one by one (the overview's rows), those parts, so that a stream whose
/// client holds an earlier render of the same [`Parts::layout`] sends only the parts
/// that changed.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The whole fragment's HTML.
    pub html: Arc<str>,
    /// Its parts, when it has them.
    pub parts: Option<Arc<Parts>>,
}

impl From<Markup> for Rendered {
    fn from(m: Markup) -> Self {
        Rendered {
            html: m.into_string().into(),
            parts: None,
        }
    }
}

/// The parts of a fragment, each an element with a unique `id` attribute whose
/// outer HTML is `html`. While `layout` (which parts there are, in which order, and
/// everything around them) stays the same, replacing each changed part by its id
/// (htmx's out-of-band swap) gives the same page as swapping the whole.
#[derive(Debug, Default)]
pub struct Parts {
    /// A digest of everything but the parts' contents.
    pub layout: u64,
    /// `(id, outer HTML)`, in page order.
    pub pieces: Vec<(String, String)>,
}

impl Parts {
    /// Appends a part and returns its HTML to place in the whole fragment.
    pub fn push(&mut self, id: String, html: Markup) -> PreEscaped<String> {
        let html = html.into_string();
        self.pieces.push((id, html.clone()));
        PreEscaped(html)
    }
}

/// `html` (an element's outer HTML) marked for htmx's out-of-band swap
/// (`hx-swap-oob="true"`: it replaces the element with the same id).
pub fn out_of_band(html: &str) -> String {
    match html
        .strip_prefix('<')
        .and_then(|rest| rest.find([' ', '>']).map(|n| n + 1))
    {
        Some(at) => format!("{} hx-swap-oob=\"true\"{}", &html[..at], &html[at..]),
        None => html.to_owned(),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_marked_out_of_band_after_its_tag_name() {
        assert_eq!(
            out_of_band("<tr id=\"r1\"><td>a</td></tr>"),
            "<tr hx-swap-oob=\"true\" id=\"r1\"><td>a</td></tr>"
        );
        assert_eq!(out_of_band("<ul>x</ul>"), "<ul hx-swap-oob=\"true\">x</ul>");
        assert_eq!(out_of_band("text"), "text");
    }
}
