//! Blobs a store before schema 9 kept in the database (8 MiB chunks), moved to the
//! blob store's files when the authority starts: each written, digest-checked and
//! published like an upload, then its chunks dropped. A crash midway repeats the
//! move at the next start (publishing the same bytes again is harmless).

use super::Blobs;
use flotilla_exec::this_process::now_ms;
use flotilla_store::authority::BlobRefs;
use flotilla_store::blobs::BlobError;
use flotilla_store::StoreError;

/// An error while moving blobs out of the database.
#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    /// The database.
    #[error("moving blobs out of the database: {0}")]
    Store(#[from] StoreError),
    /// The blob files.
    #[error("moving blobs out of the database: {0}")]
    Blobs(#[from] BlobError),
}

/// Moves every legacy blob of `store` into `blobs`; how many were moved. A blob
/// whose chunks do not hash to its name stays in the database (logged), unread.
///
/// # Errors
/// [`LegacyError`]: the blobs moved before it stay moved.
pub async fn adopt<S: BlobRefs>(store: &S, blobs: &Blobs) -> Result<usize, LegacyError> {
    let mut moved = 0;
    for r in store.blob_refs().await? {
        if r.on_disk {
            continue;
        }
        let mut w = blobs.store.writer(&r.sha256).await?;
        let mut n = 0;
        while let Some(chunk) = store.legacy_blob_chunk(r.sha256.clone(), n).await? {
            w.write(&chunk).await?;
            n += 1;
        }
        match w.commit().await {
            Ok(_) => {
                store.blob_moved(r.sha256.clone(), now_ms()).await?;
                moved += 1;
            }
            Err(e @ BlobError::DigestMismatch { .. }) => {
                tracing::error!(
                    "blob {} in the database is corrupt, left there unread: {e}",
                    r.sha256
                );
            }
            Err(e) => return Err(e.into()),
        }
    }
    if moved > 0 {
        tracing::info!(
            "moved {moved} blob(s) from the database to {}",
            blobs.settings.dir.display()
        );
    }
    Ok(moved)
}
