//! The blob store through a running authority (HTTPS on 127.0.0.1, real files in
//! its blob directory), on both store backends: uploads and downloads streamed,
//! ranged `GET`s (RFC 9110 §14), a corrupt file refused and replaced by a `PUT`,
//! garbage collection after the grace, blobs of a pre-9 store moved to files on
//! start, and an interrupted download resumed through a proxy that cuts it.

mod common;

use common::{agent_manifest, both, start_with_blob_grace, Running};
use flotilla_api::wire::PublishReleaseRequest;
use flotilla_server::blobs::gc::collect;
use flotilla_store::authority::{AuthorityStore, PostgresAuthority, SqliteAuthority};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn sha(bytes: &[u8]) -> String {
    flotilla_release::artifact::hex(&Sha256::digest(bytes))
}

/// `len` bytes that differ from piece to piece.
fn noise(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

async fn start<S: AuthorityStore + Clone>(store: S, grace: Option<Duration>) -> Running<S> {
    start_with_blob_grace(
        store,
        Duration::from_secs(45),
        "https://127.0.0.1:7443",
        grace,
        |_| {},
    )
    .await
}

fn blob_file<S: AuthorityStore + Clone>(r: &Running<S>, sha: &str) -> PathBuf {
    r.dir
        .path()
        .join("blobs/sha256")
        .join(&sha[..2])
        .join(&sha[2..])
}

/// A raw `GET /v1/blobs/{sha}` as the operator, with `range`: status, headers, body.
async fn get<S: AuthorityStore + Clone>(
    r: &Running<S>,
    sha: &str,
    range: Option<&str>,
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let http = reqwest::Client::builder()
        .tls_backend_preconfigured(flotilla_api::tls::client_config(&r.ca_pem).unwrap())
        .build()
        .unwrap();
    let mut req = http
        .get(format!("{}/v1/blobs/{sha}", r.url))
        .bearer_auth(&r.operator_credential);
    if let Some(range) = range {
        req = req.header("range", range);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    (status, headers, resp.bytes().await.unwrap().to_vec())
}

fn header(h: &reqwest::header::HeaderMap, name: &str) -> String {
    h.get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

/// Uploads are published under their digest (a file in the blob directory, a
/// reference in the store); downloads are whole or one range; a range past the
/// end is 416.
async fn uploads_downloads_and_ranges<S: AuthorityStore + Clone>(store: S) {
    let r = start(store, None).await;
    let data = noise(1, 3 * 1024 * 1024 + 123);
    let len = data.len();
    let s = sha(&data);
    let e = r
        .operator
        .put_blob(&s, b"other bytes".to_vec())
        .await
        .unwrap_err();
    assert_eq!(e.status(), Some(400), "{e}");
    assert!(e.to_string().contains("hash to"), "{e}");
    assert!(!blob_file(&r, &s).exists());
    assert!(!r.store.has_blob(s.clone()).await.unwrap());
    assert!(r.operator.put_blob(&s, data.clone()).await.unwrap());
    assert!(
        !r.operator.put_blob(&s, data.clone()).await.unwrap(),
        "not new"
    );
    assert_eq!(std::fs::read(blob_file(&r, &s)).unwrap(), data);
    assert!(r.store.has_blob(s.clone()).await.unwrap());

    let (status, h, body) = get(&r, &s, None).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "content-length"), len.to_string());
    assert_eq!(header(&h, "accept-ranges"), "bytes");
    assert!(body == data);
    let (status, h, body) = get(&r, &s, Some("bytes=1000000-")).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&h, "content-range"),
        format!("bytes 1000000-{}/{len}", len - 1)
    );
    assert!(body == data[1_000_000..]);
    let (status, h, body) = get(&r, &s, Some("bytes=70000-70009")).await;
    assert_eq!(status, 206);
    assert_eq!(
        header(&h, "content-range"),
        format!("bytes 70000-70009/{len}")
    );
    assert_eq!(body, data[70_000..70_010]);
    let (status, _, body) = get(&r, &s, Some("bytes=-5")).await;
    assert_eq!(status, 206);
    assert_eq!(body, data[len - 5..]);
    for past in [
        format!("bytes={len}-"),
        format!("bytes={}-{}", len + 5, len + 9),
    ] {
        let (status, h, _) = get(&r, &s, Some(&past)).await;
        assert_eq!(status, 416, "{past}");
        assert_eq!(header(&h, "content-range"), format!("bytes */{len}"));
    }
    let (status, _, _) = get(&r, &sha(b"never uploaded"), None).await;
    assert_eq!(status, 404);

    // The client's download, whole and resumed from a prefix it holds.
    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("blob");
    assert_eq!(
        r.operator
            .download_blob(&s, &dest, len as u64)
            .await
            .unwrap(),
        len as u64
    );
    assert!(std::fs::read(&dest).unwrap() == data);
    std::fs::write(&dest, &data[..12_345]).unwrap();
    assert_eq!(
        r.operator.resume_blob(&s, &dest, len as u64).await.unwrap(),
        len as u64
    );
    assert!(std::fs::read(&dest).unwrap() == data);
    // Already whole: nothing more to fetch.
    assert_eq!(
        r.operator.resume_blob(&s, &dest, len as u64).await.unwrap(),
        len as u64
    );
}

/// A blob edited on disk is not served as good: the transfer is cut short, the
/// copy set aside, later requests answered 500 until a `PUT` of the right bytes
/// replaces it.
async fn a_corrupt_blob_is_refused_and_replaced_by_a_put<S: AuthorityStore + Clone>(store: S) {
    let r = start(store, None).await;
    let data = noise(2, 2 * 1024 * 1024);
    let s = sha(&data);
    assert!(r.operator.put_blob(&s, data.clone()).await.unwrap());
    let path = blob_file(&r, &s);
    let mut edited = data.clone();
    edited[1_500_000] ^= 0x55;
    std::fs::write(&path, &edited).unwrap();

    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("blob");
    let e = r
        .operator
        .download_blob(&s, &dest, data.len() as u64)
        .await
        .unwrap_err();
    assert!(e.status().is_none(), "cut short, not an answer: {e}");
    assert!(
        std::fs::metadata(&dest).unwrap().len() < data.len() as u64,
        "the corrupt blob was not sent whole"
    );
    let (status, _, body) = get(&r, &s, None).await;
    assert_eq!(status, 500);
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("upload them again"), "{body}");
    let set_aside: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(set_aside.len(), 1, "{set_aside:?}");
    assert!(set_aside[0].starts_with(".corrupt-"), "{set_aside:?}");

    assert!(!r.operator.put_blob(&s, data.clone()).await.unwrap());
    let (status, _, body) = get(&r, &s, None).await;
    assert_eq!(status, 200);
    assert!(body == data);
}

/// What garbage collection removes: an unreferenced blob once older than the
/// grace (never a released one) and a crashed upload's temporary file; with a
/// short grace the authority does it on its own.
async fn garbage_collection_after_the_grace<S: AuthorityStore + Clone>(store: S) {
    let r = start(store.clone(), Some(Duration::from_secs(3600))).await;
    let released = noise(3, 100_000);
    let loose = noise(4, 50_000);
    let (rs, ls) = (sha(&released), sha(&loose));
    assert!(r.operator.put_blob(&rs, released.clone()).await.unwrap());
    assert!(r.operator.put_blob(&ls, loose.clone()).await.unwrap());
    let keys = tempfile::tempdir().unwrap();
    let k = flotilla_release::sign::keygen(keys.path(), "test", false).unwrap();
    let secret = std::fs::read_to_string(&k.secret_path).unwrap();
    let manifest = agent_manifest("2.0.0", &rs, released.len() as u64);
    let signature = flotilla_release::sign::sign(&secret, manifest.as_bytes(), "test").unwrap();
    r.operator
        .publish_release(&PublishReleaseRequest {
            manifest,
            signature,
        })
        .await
        .unwrap();
    let tmp = blob_file(&r, &ls)
        .parent()
        .unwrap()
        .join(format!(".tmp-{ls}-1-1"));
    std::fs::write(&tmp, b"half an upload").unwrap();

    // Within the grace: nothing goes.
    let c = collect(&r.state, SystemTime::now()).await.unwrap();
    assert!(c.blobs.is_empty() && c.leftovers == 0, "{c:?}");
    let later = SystemTime::now() + Duration::from_secs(2 * 3600);
    let c = collect(&r.state, later).await.unwrap();
    assert_eq!(c.blobs, vec![ls.clone()]);
    assert_eq!(c.leftovers, 1);
    assert!(!blob_file(&r, &ls).exists() && !tmp.exists());
    assert!(!r.store.has_blob(ls.clone()).await.unwrap());
    assert_eq!(get(&r, &ls, None).await.0, 404);
    assert!(blob_file(&r, &rs).exists());
    assert!(get(&r, &rs, None).await.2 == released);
    // Uploaded again: back, with a fresh grace.
    assert!(r.operator.put_blob(&ls, loose.clone()).await.unwrap());
    let c = collect(&r.state, SystemTime::now()).await.unwrap();
    assert!(c.blobs.is_empty(), "{c:?}");
    drop(r);

    // A one-second grace: the authority collects by itself.
    let r = start(store, Some(Duration::from_secs(1))).await;
    let other = noise(8, 10_000);
    let os = sha(&other);
    assert!(r.operator.put_blob(&os, other).await.unwrap());
    let gone = flotilla_testkit::wait_until_async(Duration::from_secs(30), || async {
        !blob_file(&r, &os).exists() && !r.store.has_blob(os.clone()).await.unwrap()
    })
    .await;
    assert!(gone, "the unreferenced blob was never collected");
    assert!(r.store.has_blob(rs.clone()).await.unwrap());
}

/// A TCP proxy to `upstream` on 127.0.0.1: its first connection is cut once
/// `cut_after` bytes went from upstream to the client; the bytes it passed that
/// way on later connections are counted.
async fn cutting_proxy(upstream: String, cut_after: u64) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let later = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&later);
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((client, _)) = listener.accept().await {
            let server = tokio::net::TcpStream::connect(&upstream).await.unwrap();
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let cut = first.then_some(cut_after);
            first = false;
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut cr, &mut sw).await;
            });
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                let mut passed = 0u64;
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if cut.is_some_and(|c| passed + n as u64 > c) {
                        // Dropping both halves closes the client's connection.
                        return;
                    }
                    passed += n as u64;
                    if cut.is_none() {
                        counted.fetch_add(n as u64, Ordering::SeqCst);
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("https://{addr}"), later)
}

/// A download cut midway continues from the bytes it holds: the second request
/// carries only the rest.
async fn an_interrupted_download_resumes<S: AuthorityStore + Clone>(store: S) {
    let r = start(store, None).await;
    let data = noise(5, 4 * 1024 * 1024);
    let len = data.len() as u64;
    let s = sha(&data);
    assert!(r.operator.put_blob(&s, data.clone()).await.unwrap());
    let (url, passed) =
        cutting_proxy(r.url.trim_start_matches("https://").to_string(), len / 2).await;
    let client =
        flotilla_api::Client::new(&url, &r.ca_pem, Some(r.operator_credential.clone())).unwrap();
    let t = tempfile::tempdir().unwrap();
    let dest = t.path().join("blob");
    std::fs::write(&dest, b"").unwrap();
    let e = client.resume_blob(&s, &dest, len).await.unwrap_err();
    assert!(e.status().is_none(), "{e}");
    let have = std::fs::metadata(&dest).unwrap().len();
    assert!(have > 0 && have < len, "{have} of {len} bytes kept");
    assert_eq!(client.resume_blob(&s, &dest, len).await.unwrap(), len);
    assert!(std::fs::read(&dest).unwrap() == data);
    let second = passed.load(Ordering::SeqCst);
    // The rest, plus TLS and headers: far less than the whole blob again.
    assert!(
        second < len - have + 64 * 1024,
        "{second} bytes sent after {have} of {len} were kept"
    );
}

/// A store from before schema 9 (a blob in the database's chunks): the authority
/// moves it to a file when it starts and serves it from there.
async fn legacy_blob_is_served_from_a_file<S: AuthorityStore + Clone>(store: S, data: &[u8]) {
    let s = sha(data);
    let r = start(store, None).await;
    assert_eq!(std::fs::read(blob_file(&r, &s)).unwrap(), data);
    let refs = r.store.blob_refs().await.unwrap();
    assert!(refs.iter().all(|b| b.on_disk), "{refs:?}");
    assert_eq!(r.store.legacy_blob_chunk(s.clone(), 0).await.unwrap(), None);
    assert!(get(&r, &s, None).await.2 == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_legacy_blob_is_served_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("authority.db");
    let data = noise(6, flotilla_store::authority::BLOB_CHUNK_BYTES + 999);
    flotilla_store::authority::testing::sqlite_with_legacy_blob(&path, &sha(&data), &data);
    legacy_blob_is_served_from_a_file(SqliteAuthority::open(&path).unwrap(), &data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_legacy_blob_is_served_from_a_file() {
    use flotilla_store::authority::testing;
    let admin = testing::admin_url();
    let db = testing::create_database(&admin).await.unwrap();
    let data = noise(7, flotilla_store::authority::BLOB_CHUNK_BYTES + 999);
    testing::postgres_with_legacy_blob(&db.url, &sha(&data), &data).await;
    let store = PostgresAuthority::connect(&db.url).await.unwrap();
    legacy_blob_is_served_from_a_file(store, &data).await;
    testing::drop_database(&admin, &db.name).await.unwrap();
}

both!(uploads_downloads_and_ranges);
both!(a_corrupt_blob_is_refused_and_replaced_by_a_put);
both!(garbage_collection_after_the_grace);
both!(an_interrupted_download_resumes);
