//! The operational pages: a component (`/ui/components/{name}`: every status signal
//! with its evidence, identities and drift key by key, restarts, the operations
//! that touched it, its log following live), the stacks (`/ui/stacks`,
//! `/ui/stacks/{name}`: members, their state, route health), and the lifecycle
//! actions they offer, each showing its plan and equivalent command first
//! ([`actions`], over [`crate::controller`]).
//!
//! One live view, [`VIEW`], whose argument names the page the way
//! `flotilla_api::links::Link::parse` reads it (`component/NAME`, `stack/NAME`,
//! `stacks`). A component's log follows on the same stream as a [`Tail`]
//! ([`logs`]): its lines come from the component's agent as they are written, not
//! from a change of the fleet's state.
//!
//! Files: [`component`], [`stacks`], [`actions`] (plan, confirm, the operations
//! shown), [`logs`] (the log pane and its tail), [`files`] (this section's
//! script and style sheet: the log's following/paused state).

pub(crate) mod actions;
pub(crate) mod component;
pub(crate) mod files;
pub(crate) mod logs;
pub(crate) mod stacks;

use super::super::live::{Fragment, Tail};
use crate::state::AppState;
use axum::Router;
use flotilla_api::links::Link;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The live view's name (`/ui/events?view=ops&arg=component/NAME`).
pub(crate) const VIEW: &str = "ops";

/// Every route of these pages.
pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .merge(component::routes::<S>())
        .merge(stacks::routes::<S>())
        .merge(actions::routes::<S>())
        .merge(files::routes())
}

/// The live fragments of the page `arg` names.
pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    match Link::parse(arg?).ok()? {
        Link::Component(name) => Some(component::feed::<S>(name)),
        Link::Stack(name) => Some(stacks::feed::<S>(Some(name))),
        Link::Stacks => Some(stacks::feed::<S>(None)),
        _ => None,
    }
}

/// The tails of the page `arg` names: a component's log.
pub(crate) fn tails<S: AuthorityStore>(arg: Option<&str>) -> Vec<Tail<S>> {
    match arg.and_then(|a| Link::parse(a).ok()) {
        Some(Link::Component(name)) => vec![logs::tail::<S>(name)],
        _ => Vec::new(),
    }
}
