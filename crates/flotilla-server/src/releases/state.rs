//! The releases' state in memory: every rollout, what each agent last said about its
//! release, the pids of its last reports, the pending unskip requests, and the
//! indexes that wake the long polls on a change.

use crate::api;
use flotilla_release::rollout::{HostUpdate, Rollout};
use flotilla_store::authority::AuthorityStore;
use std::collections::BTreeMap;
use tokio::sync::watch;

/// The rollouts and what each agent last said about its release, in memory beside
/// the store (loaded at start; every change is written to the store first).
pub struct Releases {
    pub(crate) rollouts: tokio::sync::Mutex<BTreeMap<u64, Rollout>>,
    pub(crate) updates: std::sync::Mutex<BTreeMap<String, HostUpdate>>,
    /// Per host, the pids of its last reports (oldest first, at most [`PIDS_KEPT`]) and
    /// when each arrived: two agents reporting for one host alternate.
    pub(crate) pids: std::sync::Mutex<BTreeMap<String, std::collections::VecDeque<(u32, i64)>>>,
    pub(crate) index: watch::Sender<u64>,
    /// The pending unskip requests by id (each change is written to the store first).
    pub(crate) unskips: tokio::sync::Mutex<BTreeMap<u64, api::UnskipDto>>,
    /// Bumped whenever an unskip request changes (wakes `GET /v1/unskips/{id}`).
    pub(crate) unskip_changes: watch::Sender<u64>,
    /// The stored version of each rollout in `rollouts` (its next write is
    /// compare-and-swap on it).
    pub(crate) versions: std::sync::Mutex<BTreeMap<u64, u64>>,
}

/// How many of a host's last reporting pids are kept to tell two agents apart.
pub(crate) const PIDS_KEPT: usize = 6;

/// Two agents report for one host when, among its reports within `window_ms` of `now`,
/// a pid reported, then another, then the first again (a self-update or a restart
/// changes the pid once and the old one falls silent). Returns the two pids.
pub fn two_agents(
    pids: &std::collections::VecDeque<(u32, i64)>,
    now: i64,
    window_ms: i64,
) -> Option<(u32, u32)> {
    let recent: Vec<u32> = pids
        .iter()
        .filter(|(_, at)| now - at <= window_ms)
        .map(|(p, _)| *p)
        .collect();
    for (i, a) in recent.iter().enumerate() {
        let Some(j) = recent[i + 1..].iter().position(|b| b != a) else {
            continue;
        };
        let b = recent[i + 1 + j];
        if recent[i + 1 + j + 1..].contains(a) {
            return Some((*a, b));
        }
    }
    None
}

impl Releases {
    /// Loads every rollout and the latest update report of every host from `store`.
    ///
    /// # Errors
    /// The store's; a stored document that does not parse is skipped with an error
    /// logged (it cannot be advanced, and nothing is assigned from it).
    pub async fn load<S: AuthorityStore>(
        store: &S,
    ) -> Result<Releases, flotilla_store::StoreError> {
        let (rollouts, versions) = stored_rollouts(store).await?;
        let updates = stored_updates(store).await?;
        let unskips = stored_unskips(store).await?;
        Ok(Releases {
            versions: std::sync::Mutex::new(versions),
            rollouts: tokio::sync::Mutex::new(rollouts),
            updates: std::sync::Mutex::new(updates),
            pids: std::sync::Mutex::new(BTreeMap::new()),
            index: watch::Sender::new(1),
            unskips: tokio::sync::Mutex::new(unskips),
            unskip_changes: watch::Sender::new(0),
        })
    }

    pub(crate) fn bump(&self) {
        self.index.send_modify(|i| *i += 1);
    }

    /// Reads the rollouts and pending unskip requests again from `store` (another
    /// authority changed them) and wakes the polls on them.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn refresh<S: AuthorityStore>(
        &self,
        store: &S,
    ) -> Result<(), flotilla_store::StoreError> {
        // Each read under its lock: a change made here meanwhile (written to the
        // store first, then to memory, under the same lock) is not lost.
        let mut rollouts = self.rollouts.lock().await;
        let (fresh, versions) = stored_rollouts(store).await?;
        *rollouts = fresh;
        *self.versions.lock().expect("not poisoned") = versions;
        drop(rollouts);
        let mut unskips = self.unskips.lock().await;
        *unskips = stored_unskips(store).await?;
        drop(unskips);
        self.bump();
        self.unskip_changes.send_modify(|i| *i += 1);
        Ok(())
    }

    /// Reads every host's last update report again from `store` (reports that
    /// reached other authorities).
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn refresh_updates<S: AuthorityStore>(
        &self,
        store: &S,
    ) -> Result<(), flotilla_store::StoreError> {
        let fresh = stored_updates(store).await?;
        *self.updates.lock().expect("not poisoned") = fresh;
        Ok(())
    }

    /// Reads rollout `id` again from `store` into memory (its write met another
    /// writer's); whether it still exists.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn reread<S: AuthorityStore>(
        &self,
        store: &S,
        rollouts: &mut BTreeMap<u64, Rollout>,
        id: u64,
    ) -> Result<bool, flotilla_store::StoreError> {
        let Some(r) = store.rollout(id).await? else {
            return Ok(false);
        };
        match serde_json::from_str::<Rollout>(&r.doc) {
            Ok(doc) => {
                rollouts.insert(id, doc);
                self.versions
                    .lock()
                    .expect("not poisoned")
                    .insert(id, r.version);
                Ok(true)
            }
            Err(e) => {
                tracing::error!("rollout {id}: stored document does not parse: {e}");
                Ok(false)
            }
        }
    }
}

/// Every stored rollout that parses, with its version. A rollout just created
/// (`{}` until its document is written) is skipped quietly.
async fn stored_rollouts<S: AuthorityStore>(
    store: &S,
) -> Result<(BTreeMap<u64, Rollout>, BTreeMap<u64, u64>), flotilla_store::StoreError> {
    let mut rollouts = BTreeMap::new();
    let mut versions = BTreeMap::new();
    for r in store.rollouts().await? {
        match serde_json::from_str::<Rollout>(&r.doc) {
            Ok(doc) => {
                rollouts.insert(r.id, doc);
                versions.insert(r.id, r.version);
            }
            Err(_) if r.doc == "{}" => {}
            Err(e) => tracing::error!("rollout {}: stored document does not parse: {e}", r.id),
        }
    }
    Ok((rollouts, versions))
}

/// Every host's last update report that parses.
async fn stored_updates<S: AuthorityStore>(
    store: &S,
) -> Result<BTreeMap<String, HostUpdate>, flotilla_store::StoreError> {
    let mut updates = BTreeMap::new();
    for u in store.host_updates().await? {
        if let Ok(doc) = serde_json::from_str::<HostUpdate>(&u.doc) {
            updates.insert(u.host, doc);
        }
    }
    Ok(updates)
}

/// Every pending unskip request that parses, by id.
async fn stored_unskips<S: AuthorityStore>(
    store: &S,
) -> Result<BTreeMap<u64, api::UnskipDto>, flotilla_store::StoreError> {
    let mut unskips = BTreeMap::new();
    for r in store.pending_unskips().await? {
        match serde_json::from_str::<api::UnskipDto>(&r.doc) {
            Ok(mut doc) => {
                doc.id = r.id;
                unskips.insert(r.id, doc);
            }
            Err(e) => tracing::error!("unskip {}: stored document does not parse: {e}", r.id),
        }
    }
    Ok(unskips)
}
