//! Writing a rollout back: compare-and-swap on the version this process read it
//! at, so that of two authorities advancing or acting on one rollout at once
//! exactly one write lands; the other reads the rollout again and decides anew.

use crate::failure::{internal, Failure};
use crate::state::AppState;
use flotilla_release::rollout::Rollout;
use flotilla_store::authority::{AuthorityStore, Doc};
use flotilla_store::StoreError;
use std::collections::BTreeMap;

/// What [`write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Stored; the version held moved on.
    Done,
    /// Another writer came first: nothing was written and `rollouts` holds the
    /// stored rollout again (gone from it when it no longer parses).
    Stale,
}

/// How many times an operator's action is tried again after meeting another
/// writer's change before it is answered 409.
pub(crate) const ATTEMPTS: usize = 5;

/// Writes rollout `r` (id `id`, changed at `now`, ms) on the version held for it;
/// on a stale version, reads it again into `rollouts` (the caller's guard on
/// [`crate::releases::Releases::rollouts`]).
///
/// # Errors
/// The store's.
pub(crate) async fn write<S: AuthorityStore>(
    state: &AppState<S>,
    rollouts: &mut BTreeMap<u64, Rollout>,
    id: u64,
    r: &Rollout,
    now: i64,
) -> Result<Written, Failure> {
    let doc = serde_json::to_string(r).map_err(internal)?;
    let held = state
        .releases
        .versions
        .lock()
        .expect("not poisoned")
        .get(&id)
        .copied();
    let Some(version) = held else {
        state.releases.reread(&state.store, rollouts, id).await?;
        return Ok(Written::Stale);
    };
    match state
        .store
        .put_doc_if(Doc::Rollout, id, doc, now, version)
        .await
    {
        Ok(new) => {
            state
                .releases
                .versions
                .lock()
                .expect("not poisoned")
                .insert(id, new);
            Ok(Written::Done)
        }
        Err(StoreError::StaleVersion { found, .. }) => {
            tracing::info!(
                rollout = id,
                "rollout {id}: changed by another authority (version {found}, not {version}): read again"
            );
            if !state.releases.reread(&state.store, rollouts, id).await? {
                rollouts.remove(&id);
            }
            Ok(Written::Stale)
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes a rollout just created (its stored document is still the placeholder
/// of version 1).
///
/// # Errors
/// The store's; 500 when another writer changed it already (nothing else
/// knows its id yet).
pub(crate) async fn write_new<S: AuthorityStore>(
    state: &AppState<S>,
    rollouts: &mut BTreeMap<u64, Rollout>,
    id: u64,
    r: &Rollout,
    now: i64,
) -> Result<(), Failure> {
    state
        .releases
        .versions
        .lock()
        .expect("not poisoned")
        .insert(id, 1);
    match write(state, rollouts, id, r, now).await? {
        Written::Done => Ok(()),
        Written::Stale => Err(internal(format!(
            "rollout {id} was changed by another writer as it was created"
        ))),
    }
}
