//! Which blobs exist: the database's side of the blob store.
//!
//! A blob's bytes live in files beside the database ([`crate::blobs`]); the
//! database only keeps a reference per digest ([`BlobRef`]): its size, when it
//! was last uploaded (garbage collection spares a blob uploaded within its grace)
//! and whether its bytes are on disk yet. Stores made before schema 9 kept the
//! bytes in the database in chunks of [`BLOB_CHUNK_BYTES`](super::BLOB_CHUNK_BYTES);
//! such a blob is *legacy* (`on_disk` false) until the authority moved it out
//! ([`BlobRefs::legacy_blob_chunk`], [`BlobRefs::blob_moved`]).

use super::AnyAuthority;
use crate::error::StoreError;
use std::future::Future;

/// One blob's reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobRef {
    /// Its SHA-256, 64 lowercase hex digits (no `sha256:` prefix).
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last uploaded (ms since the Unix epoch; 0: before schema 9).
    pub stored_ms: i64,
    /// Its bytes are a file of the blob store (false: still in the database's
    /// chunks, from before schema 9).
    pub on_disk: bool,
}

/// The database's references to blobs (a supertrait of [`AuthorityStore`]; each
/// method is one transaction, errors as there).
pub trait BlobRefs: Send + Sync + 'static {
    /// Records that the blob `sha256` (64 lowercase hex) of `size` bytes is on
    /// disk, uploaded at `stored_ms`: `true` when no reference existed (a new
    /// blob), `false` when one did (its `stored_ms` becomes the later of both,
    /// its size `size`, and it is marked on disk). Of two concurrent calls for one
    /// new digest, exactly one returns `true`.
    fn put_blob(
        &self,
        sha256: String,
        size: u64,
        stored_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Whether a reference to this digest (64 lowercase hex) exists.
    fn has_blob(&self, sha256: String) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Every reference, by digest.
    fn blob_refs(&self) -> impl Future<Output = Result<Vec<BlobRef>, StoreError>> + Send;

    /// Deletes the reference to `sha256` (and any legacy chunks) when it was
    /// last uploaded before `stored_before_ms`: `true` when deleted. A blob
    /// uploaded again since (a later `stored_ms`) is kept: `false`.
    fn delete_blob(
        &self,
        sha256: String,
        stored_before_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Chunk `n` (0, 1, 2…) of a legacy blob's bytes; `None` past its last
    /// chunk (an empty blob has none).
    fn legacy_blob_chunk(
        &self,
        sha256: String,
        n: u64,
    ) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;

    /// A legacy blob's bytes are now a file: drops its chunks and marks it on
    /// disk, with `stored_ms` (the move counts as an upload for the grace).
    fn blob_moved(
        &self,
        sha256: String,
        stored_ms: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
}

// Every AuthorityStore is a BlobRefs; AnyAuthority delegates.
impl BlobRefs for AnyAuthority {
    async fn put_blob(
        &self,
        sha256: String,
        size: u64,
        stored_ms: i64,
    ) -> Result<bool, StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.put_blob(sha256, size, stored_ms).await,
            AnyAuthority::Postgres(s) => s.put_blob(sha256, size, stored_ms).await,
        }
    }

    async fn has_blob(&self, sha256: String) -> Result<bool, StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.has_blob(sha256).await,
            AnyAuthority::Postgres(s) => s.has_blob(sha256).await,
        }
    }

    async fn blob_refs(&self) -> Result<Vec<BlobRef>, StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.blob_refs().await,
            AnyAuthority::Postgres(s) => s.blob_refs().await,
        }
    }

    async fn delete_blob(&self, sha256: String, stored_before_ms: i64) -> Result<bool, StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.delete_blob(sha256, stored_before_ms).await,
            AnyAuthority::Postgres(s) => s.delete_blob(sha256, stored_before_ms).await,
        }
    }

    async fn legacy_blob_chunk(
        &self,
        sha256: String,
        n: u64,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.legacy_blob_chunk(sha256, n).await,
            AnyAuthority::Postgres(s) => s.legacy_blob_chunk(sha256, n).await,
        }
    }

    async fn blob_moved(&self, sha256: String, stored_ms: i64) -> Result<(), StoreError> {
        match self {
            AnyAuthority::Sqlite(s) => s.blob_moved(sha256, stored_ms).await,
            AnyAuthority::Postgres(s) => s.blob_moved(sha256, stored_ms).await,
        }
    }
}
