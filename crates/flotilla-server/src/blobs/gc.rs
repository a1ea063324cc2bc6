//! Garbage collection of blobs: those no release and no session references, once
//! their last upload is older than the grace ([`super::BlobSettings::grace`]),
//! and what uploads left behind (temporary files of a crashed upload, corrupt
//! copies set aside) once as old. Run by every authority every
//! [`super::Blobs::gc_every`]; each step is conditional (a reference is deleted
//! only if still old, a file only if not written since), so several authorities
//! sharing the database and the directory may run it at once.

use crate::state::AppState;
use flotilla_release::Manifest;
use flotilla_store::authority::AuthorityStore;
use flotilla_store::blobs::BlobError;
use flotilla_store::StoreError;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one collection removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    /// Unreferenced blobs removed (reference and file), by digest.
    pub blobs: Vec<String>,
    /// Files with no reference removed (a crash between writing a file and
    /// recording it, or between deleting a reference and its file).
    pub strays: usize,
    /// Uploads' leftovers removed.
    pub leftovers: usize,
}

/// An error of a collection.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// The database.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blob files.
    #[error(transparent)]
    Blobs(#[from] BlobError),
}

/// Every blob a release or a session references (64 hex each).
pub async fn referenced<S: AuthorityStore>(store: &S) -> Result<BTreeSet<String>, StoreError> {
    let mut out = BTreeSet::new();
    for r in store.releases().await? {
        // A manifest that does not parse references nothing it can name; its
        // relay checked it, so this is not expected.
        if let Ok(m) = Manifest::parse(&r.manifest) {
            out.extend(m.artifacts.into_iter().filter_map(|a| a.blob));
        }
    }
    for s in store.sessions().await? {
        for e in store.session_events(s.id, 0).await? {
            let Ok(doc) = serde_json::from_str::<serde_json::Value>(&e.doc) else {
                continue;
            };
            if doc["kind"] == "exec" {
                if let Some(outputs) = doc["outputs"].as_array() {
                    out.extend(outputs.iter().filter_map(|o| o.as_str().map(String::from)));
                }
            }
        }
    }
    Ok(out)
}

/// One collection as of `now`: removes what was last written before
/// `now - grace` and nothing references.
///
/// # Errors
/// [`GcError`]: what was removed before it stays removed.
pub async fn collect<S: AuthorityStore>(
    state: &AppState<S>,
    now: SystemTime,
) -> Result<Collected, GcError> {
    let grace = state.blobs.settings.grace;
    let cutoff = now.checked_sub(grace).unwrap_or(UNIX_EPOCH);
    let cutoff_ms = cutoff
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut done = Collected::default();
    // References read first: a blob published after this point was uploaded
    // after it too, so its file is younger than the cutoff and spared.
    let refs = state.store.blob_refs().await?;
    let keep = referenced(&state.store).await?;
    let blobs = &state.blobs.store;
    let mut known = BTreeSet::new();
    for r in refs {
        if keep.contains(&r.sha256) || r.stored_ms >= cutoff_ms || !r.on_disk {
            known.insert(r.sha256);
            continue;
        }
        if state.store.delete_blob(r.sha256.clone(), cutoff_ms).await? {
            blobs.remove(&r.sha256, cutoff).await?;
            done.blobs.push(r.sha256);
        } else {
            known.insert(r.sha256);
        }
    }
    for b in blobs.list().await? {
        if !known.contains(&b.sha256)
            && !done.blobs.contains(&b.sha256)
            && b.modified < cutoff
            && !state.store.has_blob(b.sha256.clone()).await?
            && blobs.remove(&b.sha256, cutoff).await?
        {
            done.strays += 1;
        }
    }
    done.leftovers = blobs.sweep(cutoff).await?;
    Ok(done)
}

/// Runs [`collect`] now and every [`super::Blobs::gc_every`], logging what it
/// removed and what failed.
pub fn spawn<S: AuthorityStore>(state: &Arc<AppState<S>>) {
    let weak = Arc::downgrade(state);
    let every = state.blobs.gc_every();
    tokio::spawn(async move {
        loop {
            let Some(state) = weak.upgrade() else { return };
            match collect(&state, SystemTime::now()).await {
                Ok(c) if c == Collected::default() => {}
                Ok(c) => tracing::info!(
                    "blob garbage collection: removed {} unreferenced blob(s) {:?}, {} stray file(s), {} leftover(s) of uploads",
                    c.blobs.len(),
                    c.blobs,
                    c.strays,
                    c.leftovers
                ),
                Err(e) => tracing::warn!("blob garbage collection: {e}"),
            }
            drop(state);
            tokio::time::sleep(every.max(Duration::from_millis(100))).await;
        }
    });
}
