//! The dashboard's pages, one file each, and the registry of their live views.
//!
//! To add a page: a file here with `pub(crate) fn routes<S: AuthorityStore>() ->
//! Router<Arc<AppState<S>>>` merged in [`routes`] (one line), and, if it has live
//! fragments, `pub(crate) fn feed<S: AuthorityStore>(arg: Option<&str>) ->
//! Option<Vec<Fragment<S>>>` named in [`feed`] (one line); a source of events of
//! its own (a log) is a [`Tail`] named in [`tails`].

pub(crate) mod host;
pub(crate) mod login;
pub(crate) mod ops;
pub(crate) mod overview;

// Sessions, questions, revisions, releases and rollouts, alerts (`work`).
pub(crate) mod alerts;
pub(crate) mod frame;
pub(crate) mod questions;
pub(crate) mod releases;
pub(crate) mod revisions;
pub(crate) mod sessions;
pub(crate) mod text;
pub(crate) mod work;

use super::live::{Fragment, Tail};
use crate::state::AppState;
use axum::Router;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// Every page's routes.
pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .merge(login::routes::<S>())
        .merge(overview::routes::<S>())
        .merge(host::routes::<S>())
        .merge(work::routes::<S>())
        .merge(ops::routes::<S>())
}

/// The live fragments of page `view` with argument `arg` (what its event stream
/// sends); `None` for an unknown view.
pub(crate) fn feed<S: AuthorityStore>(view: &str, arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    match view {
        overview::VIEW => overview::feed::<S>(arg),
        host::VIEW => host::feed::<S>(arg),
        ops::VIEW => ops::feed::<S>(arg),
        _ => work::feed::<S>(view, arg),
    }
}

/// The tails of page `view` with argument `arg` (sent on its event stream beside
/// its fragments).
pub(crate) fn tails<S: AuthorityStore>(view: &str, arg: Option<&str>) -> Vec<Tail<S>> {
    match view {
        ops::VIEW => ops::tails::<S>(arg),
        _ => Vec::new(),
    }
}
