//! Fragments rendered at a hub sequence number, shared by every event stream of
//! the same view, argument and role ([`super::events`]) and by pages opened while
//! nothing changed: many open pages cost one render per change. Bounded: past
//! [`MAX_RENDERS`] entries it starts afresh.

use maud::{Markup, PreEscaped};
use std::sync::Arc;

/// Renders kept at most; beyond, the cache starts afresh.
pub const MAX_RENDERS: usize = 4096;

/// (view, argument, event, may act) → the last render and the hub sequence number
/// it was made at.
pub type RenderKey = (String, Option<String>, String, bool);

/// Fragments rendered at a hub sequence number, shared between streams.
#[derive(Default)]
pub struct Renders {
    map: std::sync::Mutex<std::collections::HashMap<RenderKey, (u64, Rendered)>>,
}

impl Renders {
    /// The last render of `key` if it was made at hub sequence number `need` or
    /// later (so it shows every change up to `need`): its sequence number and HTML.
    pub fn get(&self, key: &RenderKey, need: u64) -> Option<(u64, Rendered)> {
        let map = self.map.lock().expect("not poisoned");
        map.get(key).filter(|(s, _)| *s >= need).cloned()
    }

    /// Keeps `r` as the render of `key` at `seq` (unless a newer one is kept).
    pub fn put(&self, key: RenderKey, seq: u64, r: Rendered) {
        let mut map = self.map.lock().expect("not poisoned");
        if map.len() >= MAX_RENDERS {
            map.clear();
        }
        let newer = map.get(&key).is_some_and(|(s, _)| *s > seq);
        if !newer {
            map.insert(key, (seq, r));
        }
    }

    /// The render of `key` made at hub sequence number `need` or later: the one
    /// kept, else `render` awaited now and kept at `now` (the hub's sequence number
    /// before it renders), for the streams and pages that come next.
    pub async fn get_or_render(
        &self,
        key: RenderKey,
        need: u64,
        now: u64,
        render: impl std::future::Future<Output = Rendered>,
    ) -> (u64, Rendered) {
        if let Some(kept) = self.get(&key, need) {
            return kept;
        }
        let r = render.await;
        self.put(key, now, r.clone());
        (now, r)
    }
}

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

/// The parts of a fragment, each an element with a unique `id` attribute. While
/// `layout` (which parts there are, in which order, and everything around them)
/// stays the same, replacing each changed part by its id (htmx's out-of-band swap)
/// gives the same page as swapping the whole.
#[derive(Debug, Default)]
pub struct Parts {
    /// A digest of everything but the parts' contents.
    pub layout: u64,
    /// The parts, in page order.
    pub pieces: Vec<Piece>,
}

/// One part: its outer HTML and a hash of it (made once per render, compared by
/// every stream that sends it).
#[derive(Debug)]
pub struct Piece {
    /// The element's outer HTML, with its `id`.
    pub html: String,
    /// A hash of `html`.
    pub hash: u64,
}

impl Piece {
    /// A part of outer HTML `html`.
    pub fn new(html: String) -> Piece {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        html.hash(&mut h);
        Piece {
            hash: h.finish(),
            html,
        }
    }
}

impl Parts {
    /// Appends a part and returns its HTML to place in the whole fragment.
    pub fn push(&mut self, html: Markup) -> PreEscaped<String> {
        let html = html.into_string();
        self.pieces.push(Piece::new(html.clone()));
        PreEscaped(html)
    }
}

/// `html` (an element's outer HTML) marked for htmx's out-of-band swap
/// (`hx-swap-oob="true"`: it replaces the element with the same id), inside a
/// `<template>`: a template's content is parsed on its own, so a table row keeps
/// its `<tr>` whatever precedes it in the event (htmx swaps the out-of-band
/// elements it finds in templates).
pub fn out_of_band(html: &str) -> String {
    match html
        .strip_prefix('<')
        .and_then(|rest| rest.find([' ', '>']).map(|n| n + 1))
    {
        Some(at) => format!(
            "<template>{} hx-swap-oob=\"true\"{}</template>",
            &html[..at],
            &html[at..]
        ),
        None => html.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_marked_out_of_band_after_its_tag_name() {
        assert_eq!(
            out_of_band("<tr id=\"r1\"><td>a</td></tr>"),
            "<template><tr hx-swap-oob=\"true\" id=\"r1\"><td>a</td></tr></template>"
        );
        assert_eq!(
            out_of_band("<ul>x</ul>"),
            "<template><ul hx-swap-oob=\"true\">x</ul></template>"
        );
        assert_eq!(out_of_band("text"), "text");
    }
}
