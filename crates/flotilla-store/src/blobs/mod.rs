//! Blob bytes beside the database: release artifacts and sessions' whole outputs,
//! each named by the SHA-256 of its bytes.
//!
//! The database keeps only references ([`crate::authority::BlobRefs`]); the bytes
//! are in a [`BlobStore`]. One implementation, [`FsBlobStore`]: files under a
//! directory (`<dir>/sha256/ab/cdef…`, the digest split after its first two hex
//! digits), which several authorities may share (any POSIX file system they all
//! mount, with atomic `rename` within a directory and `fsync` honoured). The trait
//! is object-safe (boxed futures), so that an object store can be added beside it.
//!
//! Guarantees of every implementation:
//! - **Nothing unchecked becomes visible**: a blob is written under a temporary
//!   name, made durable, and only published under its digest's name when the bytes
//!   written hash to it ([`BlobWriter::commit`]).
//! - **Nothing corrupt is served as good**: a [`BlobReader`] hashes the whole blob
//!   while it reads and holds its last piece back until the digest matched; a
//!   mismatch (a file edited on disk) is [`BlobError::Corrupt`], and the bad copy is
//!   moved aside so that a new upload of the right bytes replaces it.
//! - **Bounded memory**: reads and writes go piece by piece ([`READ_PIECE`] bytes
//!   at most per read), whatever the blob's size.

pub mod fs;

pub use fs::FsBlobStore;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::SystemTime;

/// A boxed `Send` future (the trait's methods return these to stay object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The most bytes a [`BlobReader`] returns at once (64 KiB).
pub const READ_PIECE: usize = 64 * 1024;

/// An error of the blob store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BlobError {
    /// The name is not a SHA-256 as 64 lowercase hex digits.
    #[error("`{0}` is not a SHA-256 (64 lowercase hex digits)")]
    NotSha256(String),
    /// A file-system call failed.
    #[error("blob store, {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The bytes written do not hash to the name they were written under (nothing
    /// was published).
    #[error("the {size} bytes sent hash to {found}, not {expected}")]
    DigestMismatch {
        /// The name (64 hex).
        expected: String,
        /// What they hash to (64 hex).
        found: String,
        /// How many bytes were written.
        size: u64,
    },
    /// A stored blob's bytes do not hash to its name (edited or damaged on disk):
    /// the copy was moved aside to `moved_to` (when it still was the one at its
    /// name); uploading the right bytes replaces it.
    #[error("blob {sha256} is corrupt: its bytes hash to {found} (moved aside to {}; upload its bytes again)", moved_to.display())]
    Corrupt {
        /// The blob's name (64 hex).
        sha256: String,
        /// What its bytes hash to (64 hex), or `truncated` when the file ended
        /// before its size.
        found: String,
        /// Where the bad copy is now.
        moved_to: PathBuf,
    },
}

/// A blob as stored (for garbage collection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlob {
    /// Its name, 64 lowercase hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was last written.
    pub modified: SystemTime,
}

/// Where blob bytes are kept (see the [module docs](self)).
pub trait BlobStore: Send + Sync + 'static {
    /// Starts writing the blob `sha256` (64 lowercase hex): bytes go to a
    /// temporary place until [`BlobWriter::commit`]; dropping the writer discards
    /// them. A blob already stored under that name is replaced at commit
    /// (atomically: a reader sees the old bytes or the new, never a mix).
    ///
    /// # Errors
    /// [`BlobError::NotSha256`], [`BlobError::Io`].
    fn writer<'a>(
        &'a self,
        sha256: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn BlobWriter>, BlobError>>;

    /// Opens the blob `sha256` for reading; `None` when it is not stored.
    ///
    /// # Errors
    /// [`BlobError::NotSha256`], [`BlobError::Io`].
    fn open<'a>(
        &'a self,
        sha256: &'a str,
    ) -> BoxFuture<'a, Result<Option<Box<dyn BlobReader>>, BlobError>>;

    /// Every stored blob (not the temporary or set-aside ones).
    ///
    /// # Errors
    /// [`BlobError::Io`].
    fn list(&self) -> BoxFuture<'_, Result<Vec<StoredBlob>, BlobError>>;

    /// Removes the blob `sha256` when it was last written before `before`:
    /// `true` when removed (`false`: absent, or written since).
    ///
    /// # Errors
    /// [`BlobError::NotSha256`], [`BlobError::Io`].
    fn remove<'a>(
        &'a self,
        sha256: &'a str,
        before: SystemTime,
    ) -> BoxFuture<'a, Result<bool, BlobError>>;

    /// Removes what uploads left behind (temporary files of writers that never
    /// committed, e.g. after a crash) and corrupt copies set aside, when last
    /// written before `before`; how many were removed.
    ///
    /// # Errors
    /// [`BlobError::Io`].
    fn sweep(&self, before: SystemTime) -> BoxFuture<'_, Result<usize, BlobError>>;
}

/// A blob being written ([`BlobStore::writer`]).
pub trait BlobWriter: Send {
    /// Appends `bytes`.
    ///
    /// # Errors
    /// [`BlobError::Io`].
    fn write<'a>(&'a mut self, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), BlobError>>;

    /// How many bytes were written so far.
    fn written(&self) -> u64;

    /// Makes the bytes durable and, when they hash to the blob's name, publishes
    /// them under it; their size. Nothing is published otherwise.
    ///
    /// # Errors
    /// [`BlobError::DigestMismatch`], [`BlobError::Io`].
    fn commit(self: Box<Self>) -> BoxFuture<'static, Result<u64, BlobError>>;
}

/// A stored blob being read ([`BlobStore::open`]): the bytes of a range, piece by
/// piece, its whole digest checked before the last piece is returned.
pub trait BlobReader: Send {
    /// The blob's whole size in bytes.
    fn size(&self) -> u64;

    /// Restricts what [`BlobReader::next`] returns to bytes `start..end` (end
    /// exclusive, at most [`BlobReader::size`]); the whole blob is still read and
    /// its digest checked. Call before the first `next`.
    fn restrict(&mut self, start: u64, end: u64);

    /// The next piece of the range (at most [`READ_PIECE`] bytes); `None` once
    /// the range was returned whole and the digest matched.
    ///
    /// # Errors
    /// [`BlobError::Corrupt`] (instead of the range's last piece),
    /// [`BlobError::Io`].
    fn next(&mut self) -> BoxFuture<'_, Result<Option<Vec<u8>>, BlobError>>;
}

/// Whether `s` is a SHA-256 as 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Lowercase hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}
