//! Several authorities on one database: wake-ups that cross processes, leases
//! for the background work that must run once, and the versions documents were
//! read at (their writes are compare-and-swap).
//!
//! - **Wake-ups**: whatever wakes this process's long polls (a publish or select,
//!   a call queued, a reply, a rollout or unskip change, an agent's update
//!   report, a question answered, a session changed) is also announced
//!   ([`announce`]) as a [`Wake`] (JSON) on the store's channel
//!   ([`flotilla_store::authority::Cluster::notify`]); every authority listening
//!   ([`spawn`]) reads the change from the store and wakes its own waiters. The
//!   store stays the truth: every [`RECHECK`] each authority also compares the
//!   store's watermarks with what it has, so a lost notification costs at most
//!   that long. A payload that does not parse is logged and ignored. On SQLite
//!   (one authority) nothing of this runs: wake-ups stay in the process.
//! - **Leases** ([`Node::holds`]): advancing rollouts ([`ROLLOUTS`]), the
//!   sessions' reconciler with its idle teardown and retention ([`SESSIONS`]) and
//!   the notifications' reachability watch ([`NOTIFICATIONS`]) run on the one
//!   authority holding the lease, renewed every [`LEASE_RENEW`] for
//!   [`LEASE_TTL`] (by the database's clock); when its holder dies another takes
//!   it within [`LEASE_TTL`] plus one renewal.
//! - **Versions** ([`Node::read_at`], [`put_doc`]): the version a session or
//!   question was last read at by this process; its write names it, and a write
//!   after another authority's is refused (409 `conflict`).

pub mod node;

use node::LEASES;
pub use node::{Node, LEASE_RENEW, LEASE_TTL, NOTIFICATIONS, ROLLOUTS, SESSIONS};

use crate::failure::Failure;
use crate::state::AppState;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::{AuthorityStore, Doc, Heard};
use flotilla_store::StoreError;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often every authority compares the store's watermarks with what it holds
/// (1 s): the most a lost notification delays a wake-up.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What an authority announces to the others (the payload, as JSON with a
/// `kind`): what changed, so that they wake their own waiters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Wake {
    /// A revision was selected (published or selected) at this index.
    Selection {
        /// The selection log's index.
        index: u64,
    },
    /// A call was queued for `host`'s agent.
    Call {
        /// The host.
        host: String,
        /// The call's id.
        id: u64,
    },
    /// An agent answered call `id`.
    Reply {
        /// The call.
        id: u64,
    },
    /// A rollout or unskip request changed (assignments may have).
    Releases,
    /// An agent sent an update report (the rollouts' lease holder advances).
    Update {
        /// Its host.
        host: String,
    },
    /// A question was asked, answered or used.
    Question {
        /// The question.
        id: u64,
    },
    /// A session changed.
    Session {
        /// The session.
        id: u64,
    },
    /// Credentials were revoked (every authority forgets the ones it trusted).
    Revoked,
}

/// A [`Wake`] as sent: with who sent it (its [`Node::holder`]), so that an
/// authority does not act on its own.
#[derive(Debug, Serialize, Deserialize)]
struct Envelope {
    from: String,
    #[serde(flatten)]
    wake: Wake,
}

/// Writes document `id` of `kind` on the version this process read it at (the
/// write is refused with 409 when another writer came first); unconditionally
/// when this process never read it.
///
/// # Errors
/// 409 `conflict` for a stale version; the store's.
pub(crate) async fn put_doc<S: AuthorityStore>(
    state: &AppState<S>,
    kind: Doc,
    id: u64,
    doc: String,
) -> Result<(), Failure> {
    let now = now_ms();
    match state.cluster.version_of(kind, id) {
        Some(v) => {
            let result = state.store.put_doc_if(kind, id, doc, now, v).await;
            if let Err(StoreError::StaleVersion { found, .. }) = &result {
                // Read again before the next write.
                state.cluster.read_at(kind, id, *found);
            }
            let new = result?;
            state.cluster.read_at(kind, id, new);
        }
        None => match kind {
            Doc::Rollout => state.store.put_rollout(id, doc, now).await?,
            Doc::Session => state.store.put_session(id, doc, now).await?,
            Doc::Question => state.store.put_question(id, doc, now).await?,
        },
    }
    Ok(())
}

/// Tells the other authorities sharing the store about `wake` (nothing on a
/// store no other shares). A failure is logged: they catch up within
/// [`RECHECK`].
pub(crate) async fn announce<S: AuthorityStore>(state: &AppState<S>, wake: Wake) {
    if !state.cluster.shared {
        return;
    }
    let payload = serde_json::to_string(&Envelope {
        from: state.cluster.holder.clone(),
        wake: wake.clone(),
    })
    .expect("serialises");
    if let Err(e) = state.store.notify(payload).await {
        tracing::warn!("could not announce {wake:?} to the other authorities: {e}");
    }
}

/// Starts listening, the periodic re-check and the leases' renewals, when the
/// store is shared; nothing otherwise.
pub fn spawn<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    if !state.cluster.shared {
        return;
    }
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        loop {
            let listened = {
                let Some(state) = weak.upgrade() else { return };
                state.store.listen().await
            };
            let mut rx = match listened {
                Ok(Some(rx)) => rx,
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!("cannot listen for the other authorities' wake-ups: {e}");
                    tokio::time::sleep(RECHECK).await;
                    continue;
                }
            };
            tracing::info!("listening for the other authorities' wake-ups");
            while let Some(heard) = rx.recv().await {
                let Some(state) = weak.upgrade() else { return };
                match heard {
                    Heard::Payload(p) => match serde_json::from_str::<Envelope>(&p) {
                        Ok(e) if e.from == state.cluster.holder => {}
                        Ok(e) => apply(&state, e.wake).await,
                        Err(e) => {
                            let shown: String = p.chars().take(200).collect();
                            tracing::warn!(
                                payload = %shown,
                                "ignored a wake-up that does not parse: {e}"
                            );
                        }
                    },
                    Heard::Resync => {
                        tracing::info!("listening again: reading what may have been missed");
                        recheck(&state, true).await;
                    }
                    Heard::Lost(why) => {
                        tracing::warn!("the wake-up listener's connection was lost: {why}")
                    }
                }
            }
        }
    });
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(RECHECK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { return };
            recheck(&state, false).await;
        }
    });
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(LEASE_RENEW);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(state) = weak.upgrade() else { return };
            renew(&state).await;
        }
    });
}

/// Takes or renews every lease; records until when each is held.
async fn renew<S: AuthorityStore>(state: &AppState<S>) {
    let node = &state.cluster;
    for name in LEASES {
        let started = Instant::now();
        let ttl = LEASE_TTL.as_millis() as i64;
        let held = match state
            .store
            .take_lease(name.to_string(), node.holder.clone(), ttl)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!("renewing the lease `{name}`: {e}");
                false
            }
        };
        let mut leases = node.leases.lock().expect("not poisoned");
        let had = leases
            .get(name)
            .is_some_and(|until| Instant::now() < *until);
        if held {
            // Trusted for less than its time: the renewal's round trip and one
            // missed renewal are inside the margin.
            leases.insert(name, started + LEASE_TTL - LEASE_RENEW);
            if !had {
                tracing::info!(lease = name, holder = %node.holder, "took the lease `{name}`");
            }
        } else {
            leases.remove(name);
            if had {
                tracing::warn!(lease = name, "lost the lease `{name}`");
            }
        }
    }
    if node.holds(ROLLOUTS) {
        node.kick.notify_one();
    }
}

/// Reads the store's watermarks and wakes what moved since last seen (`all`:
/// whatever may have been missed, moved or not).
async fn recheck<S: AuthorityStore>(state: &AppState<S>, all: bool) {
    let w = match state.store.watermarks().await {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!("reading the watermarks: {e}");
            return;
        }
    };
    let before = std::mem::replace(&mut *state.cluster.seen.lock().expect("not poisoned"), w);
    if all || w.selection != before.selection {
        refresh_selection(state).await;
    }
    if all || w.last_call != before.last_call {
        wake_all_calls(state, w.last_call);
    }
    if all || w.releases != before.releases {
        refresh_releases(state).await;
    }
    if all || w.updates != before.updates {
        state
            .cluster
            .updates_dirty
            .store(true, std::sync::atomic::Ordering::SeqCst);
        refresh_updates(state).await;
    }
    if all || w.revocations != before.revocations {
        state.forget_all_credentials();
    }
    // Replies and questions are few: their waiters read again every period.
    state.replies.send_modify(|n| *n += 1);
}

/// Wakes this process's waiters for what another authority announced.
async fn apply<S: AuthorityStore>(state: &AppState<S>, wake: Wake) {
    match wake {
        Wake::Selection { index } => {
            if index > *state.index.borrow() {
                refresh_selection(state).await;
            }
        }
        Wake::Call { host, id } => {
            let tx = state
                .calls
                .lock()
                .expect("not poisoned")
                .get(&host)
                .cloned();
            if let Some(tx) = tx {
                tx.send_if_modified(|last| {
                    let moved = id > *last;
                    *last = (*last).max(id);
                    moved
                });
            }
        }
        Wake::Reply { .. } => state.replies.send_modify(|n| *n += 1),
        Wake::Releases => refresh_releases(state).await,
        Wake::Update { .. } => {
            state
                .cluster
                .updates_dirty
                .store(true, std::sync::atomic::Ordering::SeqCst);
            if state.cluster.holds(ROLLOUTS) {
                state.cluster.kick.notify_one();
            }
        }
        Wake::Question { .. } => state.ui.hub.changed(crate::ui::hub::Topic::Questions),
        Wake::Session { .. } => state.ui.hub.changed(crate::ui::hub::Topic::Sessions),
        Wake::Revoked => state.forget_all_credentials(),
    }
}

/// Installs the store's selection when it is newer than this process's.
async fn refresh_selection<S: AuthorityStore>(state: &AppState<S>) {
    match crate::state::load_current(&state.store).await {
        Ok(Some(current)) if current.selection.index > *state.index.borrow() => {
            tracing::info!(
                index = current.selection.index,
                revision = %current.selection.digest,
                "selected by another authority"
            );
            state.install(current.selection, current.topology);
        }
        Ok(_) => {}
        Err(e) => tracing::error!("reading the selection another authority made: {e}"),
    }
}

/// Wakes every host's calls poll (each reads its own calls again).
fn wake_all_calls<S>(state: &AppState<S>, last: u64) {
    let txs: Vec<_> = state
        .calls
        .lock()
        .expect("not poisoned")
        .values()
        .cloned()
        .collect();
    for tx in txs {
        tx.send_if_modified(|seen| {
            let moved = last > *seen;
            *seen = (*seen).max(last);
            moved
        });
    }
}

/// Reads the rollouts and unskip requests again and wakes the release polls.
async fn refresh_releases<S: AuthorityStore>(state: &AppState<S>) {
    if let Err(e) = state.releases.refresh(&state.store).await {
        tracing::error!("reading the rollouts another authority changed: {e}");
        return;
    }
    state.ui.hub.changed(crate::ui::hub::Topic::Releases);
}

/// Reads the agents' update reports again.
pub(crate) async fn refresh_updates<S: AuthorityStore>(state: &AppState<S>) {
    if !state
        .cluster
        .updates_dirty
        .swap(false, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    if let Err(e) = state.releases.refresh_updates(&state.store).await {
        state
            .cluster
            .updates_dirty
            .store(true, std::sync::atomic::Ordering::SeqCst);
        tracing::error!("reading the agents' update reports: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_are_json_with_a_kind() {
        let w = Wake::Call {
            host: "web-1".into(),
            id: 7,
        };
        let text = serde_json::to_string(&Envelope {
            from: "a".into(),
            wake: w.clone(),
        })
        .unwrap();
        assert_eq!(text, r#"{"from":"a","kind":"call","host":"web-1","id":7}"#);
        assert_eq!(serde_json::from_str::<Envelope>(&text).unwrap().wake, w);
        for bad in [
            r#"{"from":"a","kind":"nonsense"}"#,
            r#"{"kind":"releases"}"#,
            "not json",
        ] {
            assert!(serde_json::from_str::<Envelope>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_unshared_store_holds_every_lease() {
        let n = Node::new(false, "https://a");
        assert!(n.holds(ROLLOUTS));
        let n = Node::new(true, "https://a");
        assert!(!n.holds(ROLLOUTS));
    }
}
