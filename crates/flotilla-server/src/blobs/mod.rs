//! The authority's blob store: release artifacts and sessions' whole outputs, named
//! by their SHA-256, as files beside the database ([`flotilla_store::blobs`]); the
//! database keeps references ([`flotilla_store::authority::BlobRefs`]).
//!
//! - [`routes`]: `PUT /v1/blobs/{sha256}` (streamed to a temporary file, digest
//!   checked, then published) and `GET /v1/blobs/{sha256}` (streamed, whole or one
//!   range of `Range: bytes=…`, digest checked as it goes), in bounded memory
//!   whatever the size.
//! - [`range`]: the `Range` header (RFC 9110 §14).
//! - [`gc`]: blobs no release nor session references, removed after a grace
//!   period, and uploads' leftovers.
//! - [`legacy`]: blobs a store before schema 9 kept in the database, moved to
//!   files when the authority starts.
//!
//! Where: `<authority dir>/blobs` unless `flotilla serve --blob-dir` says
//! otherwise. Several authorities sharing one database share one blob directory
//! (any POSIX file system they all mount, with atomic `rename` within a directory
//! and `fsync` honoured: NFSv4, CephFS…).

pub mod gc;
pub mod legacy;
pub mod range;
pub mod routes;

use flotilla_store::blobs::{BlobStore, FsBlobStore};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The blob directory's name inside the authority directory, by default.
pub const BLOB_DIR: &str = "blobs";

/// How long an unreferenced blob is kept after its last upload, by default (24 h):
/// long enough to upload artifacts and publish their release.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Where the blobs are and how long unreferenced ones are kept.
#[derive(Debug, Clone)]
pub struct BlobSettings {
    /// The blob directory (`<authority dir>/blobs`, or `flotilla serve --blob-dir`).
    pub dir: PathBuf,
    /// An unreferenced blob is removed once its last upload is this old
    /// (`flotilla serve --blob-grace`); also the age after which uploads'
    /// leftovers (temporary files, corrupt copies set aside) are removed.
    pub grace: Duration,
}

impl BlobSettings {
    /// The defaults for the authority directory `dir`: `<dir>/blobs`, a grace
    /// of [`DEFAULT_GRACE`].
    pub fn in_authority_dir(dir: &std::path::Path) -> BlobSettings {
        BlobSettings {
            dir: dir.join(BLOB_DIR),
            grace: DEFAULT_GRACE,
        }
    }
}

/// The blob store the authority serves from, with its settings.
#[derive(Clone)]
pub struct Blobs {
    /// The bytes.
    pub store: Arc<dyn BlobStore>,
    /// Its settings.
    pub settings: BlobSettings,
}

impl Blobs {
    /// The file-system store that `settings` names.
    pub fn new(settings: BlobSettings) -> Blobs {
        Blobs {
            store: Arc::new(FsBlobStore::new(settings.dir.clone())),
            settings,
        }
    }

    /// How often garbage collection runs: a quarter of the grace, between 1 s
    /// and 1 h.
    pub fn gc_every(&self) -> Duration {
        (self.settings.grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
    }
}

impl std::fmt::Debug for Blobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blobs")
            .field("settings", &self.settings)
            .finish()
    }
}
