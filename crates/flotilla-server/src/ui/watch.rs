//! Feeds the hub from the authority's own wake-ups: a new selection
//! ([`Topic::Selection`] and [`Topic::Fleet`], whose status depends on it) and the
//! releases' index ([`Topic::Releases`]). Reports call the hub where they are stored
//! (`revisions::report`).

use super::hub::Topic;
use crate::state::AppState;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// Starts the watchers; they end with the authority's runtime.
pub fn spawn<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let mut selection = state.index.subscribe();
    let mut releases = state.releases.index.subscribe();
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        loop {
            let topics: &[Topic] = tokio::select! {
                r = selection.changed() => match r {
                    Ok(()) => &[Topic::Selection, Topic::Fleet],
                    Err(_) => return,
                },
                r = releases.changed() => match r {
                    Ok(()) => &[Topic::Releases],
                    Err(_) => return,
                },
            };
            let Some(state) = weak.upgrade() else { return };
            for t in topics {
                state.ui.hub.changed(*t);
            }
        }
    });
}
