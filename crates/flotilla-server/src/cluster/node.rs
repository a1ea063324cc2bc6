//! This authority among the others sharing its database ([`Node`]): who it is
//! as a lease holder, the leases it holds, the watermarks it caught up with, the
//! versions it read documents at.

use flotilla_store::authority::{Doc, Watermarks};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a lease lasts unless renewed (5 s, by the database's clock).
pub const LEASE_TTL: Duration = Duration::from_secs(5);

/// How often its holder renews a lease (1 s).
pub const LEASE_RENEW: Duration = Duration::from_secs(1);

/// The lease of advancing rollouts.
pub const ROLLOUTS: &str = "rollouts";
/// The lease of the sessions' reconciler (idle teardown, retention).
pub const SESSIONS: &str = "sessions";
/// The lease of the notifications' reachability watch.
pub const NOTIFICATIONS: &str = "notifications";

pub(crate) const LEASES: [&str; 3] = [ROLLOUTS, SESSIONS, NOTIFICATIONS];

/// This authority's part in the cluster: who it is, the leases it holds, the
/// watermarks it has caught up with, the versions it read documents at.
pub struct Node {
    /// This process as a lease holder: `<public URL> pid <pid> <random>`.
    pub holder: String,
    /// Whether the store is shared (PostgreSQL): otherwise every lease is held.
    pub(crate) shared: bool,
    /// Lease → until when (this process's monotonic clock) it is held: the
    /// renewal's start plus [`LEASE_TTL`] less one [`LEASE_RENEW`].
    pub(crate) leases: Mutex<HashMap<&'static str, Instant>>,
    pub(crate) seen: Mutex<Watermarks>,
    versions: Mutex<HashMap<(DocKey, u64), u64>>,
    /// Woken when another authority's agent report may move a rollout.
    pub(crate) kick: tokio::sync::Notify,
    /// Set when agents' update reports changed in the store (reloaded before the
    /// rollouts are advanced).
    pub(crate) updates_dirty: std::sync::atomic::AtomicBool,
}

/// [`Doc`] as a map key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum DocKey {
    Rollout,
    Session,
    Question,
}

fn key(kind: Doc) -> DocKey {
    match kind {
        Doc::Rollout => DocKey::Rollout,
        Doc::Session => DocKey::Session,
        Doc::Question => DocKey::Question,
    }
}

impl Node {
    /// A node for a store that is `shared` (or not), known to the others as
    /// `public_url` with this process's id.
    pub(crate) fn new(shared: bool, public_url: &str) -> Node {
        let random = getrandom::u32().unwrap_or(0);
        Node {
            holder: format!("{public_url} pid {} {random:08x}", std::process::id()),
            shared,
            leases: Mutex::new(HashMap::new()),
            seen: Mutex::new(Watermarks::default()),
            versions: Mutex::new(HashMap::new()),
            kick: tokio::sync::Notify::new(),
            updates_dirty: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether this authority holds lease `name` now (always, on a store no other
    /// authority shares).
    pub fn holds(&self, name: &str) -> bool {
        !self.shared
            || self
                .leases
                .lock()
                .expect("not poisoned")
                .get(name)
                .is_some_and(|until| Instant::now() < *until)
    }

    /// Records that document `id` of `kind` was read at `version`.
    pub(crate) fn read_at(&self, kind: Doc, id: u64, version: u64) {
        self.versions
            .lock()
            .expect("not poisoned")
            .insert((key(kind), id), version);
    }

    /// The version this process last read or wrote document `id` of `kind` at.
    pub(crate) fn version_of(&self, kind: Doc, id: u64) -> Option<u64> {
        self.versions
            .lock()
            .expect("not poisoned")
            .get(&(key(kind), id))
            .copied()
    }
}
