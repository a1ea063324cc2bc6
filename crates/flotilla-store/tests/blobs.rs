//! The file-system blob store against real files: what a write publishes, what a
//! read returns for whole and partial ranges, a corrupt file refused and set
//! aside, leftovers swept, removal sparing blobs written since.

use flotilla_store::blobs::{BlobError, BlobReader, BlobStore, FsBlobStore, READ_PIECE};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

fn sha(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

async fn put(store: &FsBlobStore, data: &[u8]) -> String {
    let name = sha(data);
    let mut w = store.writer(&name).await.unwrap();
    for piece in data.chunks(10_000) {
        w.write(piece).await.unwrap();
    }
    assert_eq!(w.commit().await.unwrap(), data.len() as u64);
    name
}

async fn read_all(mut r: Box<dyn BlobReader>) -> Result<Vec<u8>, BlobError> {
    let mut out = Vec::new();
    while let Some(piece) = r.next().await? {
        assert!(piece.len() <= READ_PIECE);
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

#[tokio::test]
async fn a_blob_is_published_under_its_digest_and_read_back_in_ranges() {
    let t = tempfile::tempdir().unwrap();
    let store = FsBlobStore::new(t.path());
    let data = bytes(3 * READ_PIECE + 17);
    let name = put(&store, &data).await;
    let path = store.path_of(&name);
    assert_eq!(
        path,
        t.path().join("sha256").join(&name[..2]).join(&name[2..])
    );
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let whole = store.open(&name).await.unwrap().unwrap();
    assert_eq!(whole.size(), data.len() as u64);
    assert_eq!(read_all(whole).await.unwrap(), data);
    for (start, end) in [
        (0, 1),
        (5, READ_PIECE as u64 + 3),
        (READ_PIECE as u64, 2 * READ_PIECE as u64),
        (data.len() as u64 - 1, data.len() as u64),
        (7, 7),
    ] {
        let mut r = store.open(&name).await.unwrap().unwrap();
        r.restrict(start, end);
        assert_eq!(
            read_all(r).await.unwrap(),
            data[start as usize..end as usize],
            "{start}..{end}"
        );
    }
    // Only the blob is there: no temporary file left.
    let dir: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().collect();
    assert_eq!(dir.len(), 1);
    assert_eq!(store.list().await.unwrap().len(), 1);
    assert!(store.open(&sha(b"other")).await.unwrap().is_none());
}

#[tokio::test]
async fn bytes_of_another_digest_are_never_published() {
    let t = tempfile::tempdir().unwrap();
    let store = FsBlobStore::new(t.path());
    let name = sha(b"right");
    let mut w = store.writer(&name).await.unwrap();
    w.write(b"wrong").await.unwrap();
    let err = w.commit().await.unwrap_err();
    assert!(matches!(err, BlobError::DigestMismatch { .. }), "{err}");
    assert!(store.open(&name).await.unwrap().is_none());
    let parent = store.path_of(&name).parent().unwrap().to_path_buf();
    assert_eq!(
        std::fs::read_dir(&parent).unwrap().count(),
        0,
        "temporary file removed"
    );
    // A writer dropped before commit leaves nothing either.
    let mut w = store.writer(&name).await.unwrap();
    w.write(b"rig").await.unwrap();
    drop(w);
    assert_eq!(std::fs::read_dir(&parent).unwrap().count(), 0);
    assert!(matches!(
        store.writer("ABC").await.err().unwrap(),
        BlobError::NotSha256(_)
    ));
}

#[tokio::test]
async fn a_corrupt_file_is_refused_set_aside_and_replaced_by_a_new_write() {
    let t = tempfile::tempdir().unwrap();
    let store = FsBlobStore::new(t.path());
    let data = bytes(2 * READ_PIECE + 5);
    let name = put(&store, &data).await;
    let path = store.path_of(&name);
    let mut edited = data.clone();
    edited[READ_PIECE + 1] ^= 0xff;
    std::fs::write(&path, &edited).unwrap();
    // A range before the damage is refused too: the last piece is held back.
    let mut r = store.open(&name).await.unwrap().unwrap();
    r.restrict(0, 10);
    let err = read_all(r).await.unwrap_err();
    let BlobError::Corrupt { moved_to, .. } = &err else {
        panic!("{err}")
    };
    assert_ne!(moved_to, &path);
    assert_eq!(std::fs::read(moved_to).unwrap(), edited);
    assert!(store.open(&name).await.unwrap().is_none(), "set aside");
    assert!(store.list().await.unwrap().is_empty());
    // Uploading the right bytes again serves them.
    put(&store, &data).await;
    let r = store.open(&name).await.unwrap().unwrap();
    assert_eq!(read_all(r).await.unwrap(), data);
    // A truncated file is corrupt as well.
    std::fs::write(&path, &data[..10]).unwrap();
    let err = read_all(store.open(&name).await.unwrap().unwrap())
        .await
        .unwrap_err();
    assert!(matches!(err, BlobError::Corrupt { .. }), "{err}");
}

#[tokio::test]
async fn leftovers_are_swept_and_removal_spares_blobs_written_since() {
    let t = tempfile::tempdir().unwrap();
    let store = FsBlobStore::new(t.path());
    let name = put(&store, b"kept").await;
    let parent = store.path_of(&name).parent().unwrap().to_path_buf();
    // A crashed upload's temporary file.
    std::fs::write(parent.join(format!(".tmp-{name}-1-1")), b"half").unwrap();
    let before_now = SystemTime::now() - Duration::from_secs(3600);
    assert_eq!(store.sweep(before_now).await.unwrap(), 0, "too recent");
    assert!(
        !store.remove(&name, before_now).await.unwrap(),
        "too recent"
    );
    let later = SystemTime::now() + Duration::from_secs(1);
    assert_eq!(store.sweep(later).await.unwrap(), 1);
    assert_eq!(store.list().await.unwrap().len(), 1, "the blob stays");
    assert!(store.remove(&name, later).await.unwrap());
    assert!(store.open(&name).await.unwrap().is_none());
    assert!(!store.remove(&name, later).await.unwrap());
}
