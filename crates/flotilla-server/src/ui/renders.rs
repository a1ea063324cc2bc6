//! Fragments rendered at a hub sequence number, shared by every event stream of
//! the same view, argument and role ([`super::events`]) and by pages opened while
//! nothing changed: many open pages cost one render per change. Bounded: past
//! [`MAX_RENDERS`] entries it starts afresh.

use super::live::Rendered;

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
}
