//! What can go wrong running an authority ([`AuthorityError`]).

use crate::tls::TlsError;
use flotilla_store::StoreError;
use std::net::SocketAddr;
use std::path::PathBuf;

/// What can go wrong running an authority.
#[derive(Debug, thiserror::Error)]
pub enum AuthorityError {
    /// Agent sessions cannot be set up (`sessions.toml`, Claude Code, the runtime
    /// user).
    #[error("agent sessions: {0}")]
    Sessions(String),
    /// `sessions.toml` is not valid.
    #[error(transparent)]
    SessionsConfig(#[from] crate::sessions_config::SessionsConfigError),
    /// `notifications.toml` is not valid.
    #[error(transparent)]
    NotifyConfig(#[from] crate::notify::NotifyConfigError),
    /// TLS files.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The store.
    #[error("authority store: {0}")]
    Store(#[from] StoreError),
    /// Moving blobs a store before schema 9 kept in the database to files.
    #[error(transparent)]
    LegacyBlobs(#[from] crate::blobs::legacy::LegacyError),
    /// A file of the authority directory.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The selected revision in the store does not parse as a topology.
    #[error("the selected revision {revision} in the store does not parse: {reason}")]
    CorruptRevision {
        /// The revision.
        revision: String,
        /// Why.
        reason: String,
    },
    /// Another `flotilla serve` runs on this authority directory (its database, its
    /// controller's journal and lock are this process's alone).
    #[error("another flotilla serve uses the authority directory {dir}: {holder}; stop it first, or give this one its own --authority-dir")]
    Busy {
        /// The authority directory.
        dir: PathBuf,
        /// Who holds it (pid, command line, since when), as it described itself.
        holder: String,
    },
    /// The directory was never initialised.
    #[error("{0} has no CA: run `flotilla serve init` first (or pass --tls-cert and --tls-key)")]
    NotInitialised(PathBuf),
    /// Listening failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}
