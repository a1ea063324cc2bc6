//! The pages of the fleet's work: sessions, questions, revisions, releases and
//! rollouts, alerts — their routes and live views, registered in [`super`] with one
//! line each. Untrusted text on them goes through [`super::text`]; their shell is
//! [`super::frame`].

use super::super::live::Fragment;
use super::{alerts, questions, releases, revisions, sessions};
use crate::state::AppState;
use axum::Router;
use flotilla_store::authority::AuthorityStore;
use std::sync::Arc;

/// The routes of every page here.
pub(crate) fn routes<S: AuthorityStore>() -> Router<Arc<AppState<S>>> {
    Router::new()
        .merge(questions::routes::<S>())
        .merge(sessions::routes::<S>())
        .merge(revisions::routes::<S>())
        .merge(releases::routes::<S>())
        .merge(alerts::routes::<S>())
}

/// The live fragments of view `view` (with `arg`) when it is one of these pages'.
pub(crate) fn feed<S: AuthorityStore>(view: &str, arg: Option<&str>) -> Option<Vec<Fragment<S>>> {
    match view {
        questions::LIST_VIEW => questions::list_feed::<S>(arg),
        questions::VIEW => questions::feed::<S>(arg),
        sessions::LIST_VIEW => sessions::list_feed::<S>(arg),
        sessions::VIEW => sessions::feed::<S>(arg),
        revisions::LIST_VIEW => revisions::list_feed::<S>(arg),
        revisions::VIEW => revisions::feed::<S>(arg),
        releases::LIST_VIEW => releases::list_feed::<S>(arg),
        releases::VIEW => releases::feed::<S>(arg),
        alerts::VIEW => alerts::feed::<S>(arg),
        _ => None,
    }
}
