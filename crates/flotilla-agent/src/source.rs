//! Where the agent's desired state comes from: a [`Source`] yields the host's next
//! [`Desired`] state (a snapshot and the revision it was cut from), or says nothing
//! changed. Two sources: a local inventory file ([`crate::local::LocalInventory`],
//! `flotilla agent run --inventory FILE`) and the authority
//! ([`crate::authority::AuthoritySource`], long-polling `GET
//! /v1/hosts/{host}/snapshot`).

use flotilla_model::inventory::TransportKind;
use flotilla_model::topology::{Snapshot, SnapshotError};
use flotilla_model::Topology;
use std::future::Future;
use std::path::PathBuf;

/// A desired state for this host.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The revision it comes from (`sha256:…`).
    pub revision: String,
    /// The authority's selection index (`None` for a local inventory).
    pub index: Option<u64>,
    /// The host's snapshot: its own components and host entry, and the hosts its
    /// tunnels go through.
    pub snapshot: Snapshot,
    /// Where relative paths of its components start: the inventory's directory, or
    /// the home directory for a snapshot from the authority (as `flotilla host serve`
    /// does).
    pub base_dir: PathBuf,
}

/// What a [`Source`] found.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Next {
    /// A desired state other than the one it yielded last (the first call always
    /// yields one when it can).
    Changed(Desired),
    /// Nothing new.
    Unchanged,
}

/// Why a source could not say what is desired. The agent reports it and keeps the
/// last good desired state (and its components as they are).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The inventory (or a template) could not be read.
    #[error("cannot read {path}: {why}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Cause.
        why: String,
    },
    /// The inventory does not validate.
    #[error("{path} is invalid: {why}")]
    Invalid {
        /// The inventory.
        path: PathBuf,
        /// A summary (the diagnostics themselves were printed by the loader).
        why: String,
    },
    /// The inventory does not declare the host this agent runs for.
    #[error("{path} declares no host `{host}` (hosts: {known})")]
    UnknownHost {
        /// The inventory.
        path: PathBuf,
        /// The host asked for.
        host: String,
        /// The hosts it declares, comma-separated.
        known: String,
    },
    /// The authority could not be asked, or answered something unusable.
    #[error("authority: {0}")]
    Authority(String),
}

impl SourceError {
    /// Whether a person must fix something before the source can yield anything (an
    /// unreadable or invalid inventory, an unknown host) rather than wait (an
    /// authority that cannot be reached now).
    pub fn needs_a_fix(&self) -> bool {
        !matches!(self, SourceError::Authority(_))
    }
}

/// A source of desired states. `next` waits as long as the source wants (its poll
/// interval, a long-poll) and then says what it found; the first call answers at once.
pub trait Source: Send + 'static {
    /// The next desired state, or [`Next::Unchanged`].
    ///
    /// # Errors
    /// [`SourceError`]; the next call tries again.
    fn next(&mut self) -> impl Future<Output = Result<Next, SourceError>> + Send;

    /// What it is, for logs: `inventory /etc/flotilla.toml (host local)`.
    fn describe(&self) -> String;
}

/// `snapshot` as the agent applies it: its own host entry made `local` (this process
/// runs its steps and observes its components itself, as `flotilla host serve` does),
/// everything else as received.
pub fn localized(snapshot: &Snapshot) -> Snapshot {
    let mut s = snapshot.clone();
    if let Some(h) = s.hosts.get_mut(&s.host) {
        h.transport = TransportKind::Local;
    }
    s
}

/// The topology the agent plans against for `snapshot` ([`localized`], then rebuilt
/// with [`Topology::from_snapshot`]).
///
/// # Errors
/// [`SnapshotError`] when the snapshot is inconsistent.
pub fn topology_of(snapshot: &Snapshot) -> Result<Topology, SnapshotError> {
    Topology::from_snapshot(localized(snapshot))
}
