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
        let mut rollouts = BTreeMap::new();
        for r in store.rollouts().await? {
            match serde_json::from_str::<Rollout>(&r.doc) {
                Ok(doc) => {
                    rollouts.insert(r.id, doc);
                }
                Err(e) => tracing::error!("rollout {}: stored document does not parse: {e}", r.id),
            }
        }
        let mut updates = BTreeMap::new();
        for u in store.host_updates().await? {
            if let Ok(doc) = serde_json::from_str::<HostUpdate>(&u.doc) {
                updates.insert(u.host, doc);
            }
        }
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
        Ok(Releases {
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
}
