//! Feeds the hub from the authority's own wake-ups: a new selection
//! ([`Topic::Selection`] and [`Topic::Fleet`], whose status depends on it), the
//! releases' index ([`Topic::Releases`]), and the clock: [`Topic::Fleet`] every
//! [`AGE_TICK`], because a host whose agent stops reporting turns `unreachable`
//! with no event of its own and ages move on. Reports call the hub where they are
//! stored (`revisions::report`).

use super::hub::Topic;
use crate::state::AppState;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;
use std::time::Duration;

/// How often the fleet's status is re-rendered with no report arriving.
pub const AGE_TICK: Duration = Duration::from_secs(5);

/// Starts the watchers; they end with the authority's runtime.
pub fn spawn<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let mut selection = state.index.subscribe();
    let mut releases = state.releases.index.subscribe();
    let weak = Arc::downgrade(state);
    let mut tick = tokio::time::interval(AGE_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::spawn(async move {
        tick.tick().await;
        loop {
            let topics: &[Topic] = tokio::select! {
                _ = tick.tick() => &[Topic::Fleet],
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
