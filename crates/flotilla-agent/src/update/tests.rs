//! The updater against a fake authority: signature before download, refusals, staging
//! and the hand-over to the watchdog, URLs, the skip list, a release already running,
//! and the every-start files.

use super::*;
use crate::authority::ClientError;
use flotilla_api::wire::ReleaseAssignment;
use flotilla_release::{Acceptance, Artifact, Manifest, Platform, Reason, UpdateState};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The authority, as far as the updater sees it: blobs by digest, reports kept.
#[derive(Default)]
struct Fake {
    blobs: Mutex<HashMap<String, Vec<u8>>>,
    downloads: AtomicUsize,
    reports: Mutex<Vec<HostUpdate>>,
    /// The next download fails after this many bytes of the blob were written.
    cut_once: Mutex<Option<usize>>,
    /// How many bytes `dest` held when each download began.
    resumed_from: Mutex<Vec<u64>>,
}

impl ReleaseSource for Fake {
    async fn release_assignment(
        &self,
        _host: &str,
        _index: u64,
        _wait: Duration,
    ) -> Result<ReleaseAssignment, ClientError> {
        std::future::pending().await
    }

    async fn report_update(&self, _host: &str, u: &HostUpdate) -> Result<(), ClientError> {
        self.reports.lock().unwrap().push(u.clone());
        Ok(())
    }

    async fn download_blob(
        &self,
        sha256: &str,
        dest: &Path,
        limit: u64,
    ) -> Result<u64, ClientError> {
        self.downloads.fetch_add(1, Ordering::SeqCst);
        let bytes = self
            .blobs
            .lock()
            .unwrap()
            .get(sha256)
            .cloned()
            .ok_or_else(|| ClientError(format!("404: no blob {sha256}")))?;
        // As the real client: continues from what `dest` holds, and nothing past
        // the limit is written.
        use std::io::Write;
        let have = std::fs::metadata(dest).map_or(0, |m| m.len());
        self.resumed_from.lock().unwrap().push(have);
        let mut file = std::fs::OpenOptions::new().append(true).open(dest).unwrap();
        if let Some(cut) = self.cut_once.lock().unwrap().take() {
            file.write_all(&bytes[have as usize..cut]).unwrap();
            return Err(ClientError("connection reset midway".into()));
        }
        let kept = bytes.len().min(limit as usize);
        file.write_all(&bytes[(have as usize).min(kept)..kept])
            .unwrap();
        Ok(bytes.len() as u64)
    }
}

const NEW: &[u8] = b"#!/bin/sh\necho the new build\n";

fn sha(bytes: &[u8]) -> String {
    use sha2::Digest;
    flotilla_release::artifact::hex(&sha2::Sha256::digest(bytes))
}

/// A host whose install root's current version is this test binary (a symlink to
/// it), trusting one key; a second key it does not trust.
struct Fixture {
    t: tempfile::TempDir,
    root: InstallRoot,
    dir: AgentDir,
    secret: String,
    foreign_secret: String,
    keys: TrustedKeys,
    fake: Arc<Fake>,
}

impl Fixture {
    fn new() -> Fixture {
        let t = tempfile::tempdir().unwrap();
        let root = InstallRoot::new(t.path().join("root"), BINARY);
        let me = flotilla_exec::sys::self_exe().unwrap();
        let v = root.version_dir("0.1.0", &"a".repeat(64)).unwrap();
        std::fs::create_dir_all(&v.dir).unwrap();
        std::os::unix::fs::symlink(&me, &v.binary).unwrap();
        std::os::unix::fs::symlink(
            format!("versions/{}", v.name()),
            root.root().join("current"),
        )
        .unwrap();
        let keys_dir = t.path().join("keys");
        std::fs::create_dir_all(&keys_dir).unwrap();
        let k = flotilla_release::keygen(&keys_dir, "ours", false).unwrap();
        let f = flotilla_release::keygen(&keys_dir, "theirs", false).unwrap();
        let keys =
            TrustedKeys::from_texts(&[&std::fs::read_to_string(&k.public_path).unwrap()]).unwrap();
        Fixture {
            dir: AgentDir::new(&t.path().join("state")),
            root,
            secret: std::fs::read_to_string(&k.secret_path).unwrap(),
            foreign_secret: std::fs::read_to_string(&f.secret_path).unwrap(),
            keys,
            fake: Arc::new(Fake::default()),
            t,
        }
    }

    fn updater(&self, keys: bool) -> Updater<Fake> {
        self.updater_with(keys, None)
    }

    fn updater_with(
        &self,
        keys: bool,
        backups: Option<flotilla_exec::backup::BackupPolicy>,
    ) -> Updater<Fake> {
        let cfg = UpdaterConfig {
            host: "h".into(),
            dir: self.dir.clone(),
            state_dir: self.t.path().join("state"),
            root: Some(self.root.clone()),
            keys: keys.then(|| self.keys.clone()),
            supervisor: Supervisor::None,
            wait: Duration::from_secs(30),
            report_every: Duration::from_secs(30),
            log: Arc::new(|_| {}),
            components: None,
            watchdog_program: Some("/bin/true".into()),
            backups,
        };
        Updater::start(cfg, Arc::clone(&self.fake)).unwrap()
    }

    fn manifest(&self, version: &str, serial: u64, bytes: &[u8]) -> Manifest {
        let (os, arch) = Platform::current();
        self.fake
            .blobs
            .lock()
            .unwrap()
            .insert(sha(bytes), bytes.to_vec());
        Manifest {
            name: AGENT_RELEASE.into(),
            version: version.into(),
            serial,
            expires: "2099-01-01T00:00:00Z".into(),
            artifacts: vec![Artifact {
                os: os.into(),
                arch: arch.into(),
                url: None,
                blob: Some(sha(bytes)),
                sha256: sha(bytes),
                size: bytes.len() as u64,
            }],
        }
    }

    fn assignment(&self, m: &Manifest, rollout: u64, secret: Option<&str>) -> Assignment {
        let bytes = m.to_bytes();
        Assignment {
            rollout,
            name: m.name.clone(),
            version: m.version.clone(),
            manifest: String::from_utf8(bytes.clone()).unwrap(),
            signature: secret
                .map(|s| flotilla_release::sign(s, &bytes, "test").unwrap())
                .unwrap_or_default(),
            min_healthy_ms: 1000,
            timeout_ms: 10_000,
            rollback_of: None,
        }
    }

    fn record(&self) -> UpdateRecord {
        UpdateRecord::load(&self.root)
            .unwrap()
            .expect("update.json")
    }

    fn staged_versions(&self) -> usize {
        self.root.versions().unwrap().len()
    }
}

async fn refused(f: &Fixture, u: &Updater<Fake>, a: &Assignment, reason: Reason) {
    assert!(u.consider(a).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Refused, "{rec:#?}");
    assert_eq!(rec.reason, Some(reason), "{rec:#?}");
    assert_eq!(f.staged_versions(), 1, "nothing staged");
    assert!(std::fs::read_dir(f.root.downloads_dir())
        .map(|d| d.count() == 0)
        .unwrap_or(true));
}

#[tokio::test]
async fn the_signature_is_checked_before_anything_is_downloaded() {
    let f = Fixture::new();
    let u = f.updater(true);
    let m = f.manifest("0.2.0", 5, NEW);
    refused(&f, &u, &f.assignment(&m, 1, None), Reason::SignatureInvalid).await;
    assert!(
        f.record().detail.contains("unsigned"),
        "{}",
        f.record().detail
    );
    refused(
        &f,
        &u,
        &f.assignment(&m, 2, Some(&f.foreign_secret)),
        Reason::SignatureInvalid,
    )
    .await;
    assert!(
        f.record().detail.contains("signed by key"),
        "{}",
        f.record().detail
    );
    // A manifest edited after signing.
    let mut a = f.assignment(&m, 3, Some(&f.secret));
    a.manifest = a.manifest.replace("0.2.0", "0.2.1");
    a.version = "0.2.1".into();
    refused(&f, &u, &a, Reason::SignatureInvalid).await;
    // No key pinned at all.
    let none = f.updater(false);
    refused(
        &f,
        &none,
        &f.assignment(&m, 4, Some(&f.secret)),
        Reason::SignatureInvalid,
    )
    .await;
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn expired_rolled_back_serials_and_other_platforms_are_refused() {
    let f = Fixture::new();
    let u = f.updater(true);
    let mut m = f.manifest("0.2.0", 5, NEW);
    m.expires = "2001-01-01T00:00:00Z".into();
    refused(
        &f,
        &u,
        &f.assignment(&m, 1, Some(&f.secret)),
        Reason::Expired,
    )
    .await;
    let mut m = f.manifest("0.2.0", 5, NEW);
    m.artifacts[0].os = "plan9".into();
    refused(
        &f,
        &u,
        &f.assignment(&m, 2, Some(&f.secret)),
        Reason::NoMatchingArtifact,
    )
    .await;
    // A higher serial accepted before from this key: a lower one is a rollback attack.
    let mut acc = Acceptance::default();
    acc.accept(&f.keys.key_ids()[0], 9);
    write_json(&f.dir.acceptance_file(), &acc).unwrap();
    let m = f.manifest("0.2.0", 5, NEW);
    refused(
        &f,
        &u,
        &f.assignment(&m, 3, Some(&f.secret)),
        Reason::SerialRollback,
    )
    .await;
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_rollback_goes_back_only_to_the_version_kept_as_previous() {
    let f = Fixture::new();
    let u = f.updater(true);
    let mut acc = Acceptance::default();
    acc.accept(&f.keys.key_ids()[0], 9);
    write_json(&f.dir.acceptance_file(), &acc).unwrap();
    // An older release this host never ran, even marked as a rollback: refused.
    let m = f.manifest("0.2.0", 5, NEW);
    let mut a = f.assignment(&m, 3, Some(&f.secret));
    a.rollback_of = Some(2);
    refused(&f, &u, &a, Reason::SerialRollback).await;
    assert!(
        f.record().detail.contains("ran before and still keeps"),
        "{}",
        f.record().detail
    );
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
    // The same release kept as `previous` (this host ran it before the current one).
    let v = f.root.version_dir("0.2.0", &sha(NEW)).unwrap();
    std::fs::create_dir_all(&v.dir).unwrap();
    std::fs::write(&v.binary, NEW).unwrap();
    std::os::unix::fs::symlink(
        format!("versions/{}", v.name()),
        f.root.root().join("previous"),
    )
    .unwrap();
    // Not as a rollback: still a lower serial, refused.
    let plain = f.assignment(&m, 4, Some(&f.secret));
    assert!(u.consider(&plain).await);
    assert_eq!(f.record().reason, Some(Reason::SerialRollback));
    // As the operator's rollback: taken, staged and handed to the watchdog.
    let mut a = f.assignment(&m, 5, Some(&f.secret));
    a.rollback_of = Some(2);
    assert!(u.consider(&a).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
    assert_eq!(rec.sha256, sha(NEW));
    // The highest serial accepted stays: the next release still needs a higher one.
    let acc: Acceptance = read_json(&f.dir.acceptance_file()).unwrap();
    assert_eq!(acc.highest[&f.keys.key_ids()[0]], 9);
}

#[tokio::test]
async fn a_corrupt_or_wrongly_sized_artifact_is_refused_after_download() {
    let f = Fixture::new();
    let u = f.updater(true);
    let m = f.manifest("0.2.0", 5, NEW);
    // The authority serves other bytes under the digest.
    f.fake
        .blobs
        .lock()
        .unwrap()
        .insert(sha(NEW), b"#!/bin/sh\necho evil!!!!!!!!!\n".to_vec());
    refused(
        &f,
        &u,
        &f.assignment(&m, 1, Some(&f.secret)),
        Reason::DigestMismatch,
    )
    .await;
    let mut m = f.manifest("0.2.1", 6, NEW);
    m.artifacts[0].size += 1;
    refused(
        &f,
        &u,
        &f.assignment(&m, 2, Some(&f.secret)),
        Reason::SizeMismatch,
    )
    .await;
}

#[tokio::test]
async fn an_interrupted_download_resumes_from_the_bytes_it_has() {
    let f = Fixture::new();
    let u = f.updater(true);
    let m = f.manifest("0.2.0", 5, NEW);
    let half = NEW.len() / 2;
    *f.fake.cut_once.lock().unwrap() = Some(half);
    assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
    assert_eq!(std::fs::read(&rec.to.unwrap().binary).unwrap(), NEW);
    // The second attempt began where the first stopped.
    assert_eq!(*f.fake.resumed_from.lock().unwrap(), vec![0, half as u64]);
}

#[tokio::test]
async fn a_signed_release_is_staged_and_handed_to_the_watchdog_once() {
    let f = Fixture::new();
    let u = f.updater(true);
    let m = f.manifest("0.2.0", 5, NEW);
    let a = f.assignment(&m, 1, Some(&f.secret));
    assert!(u.consider(&a).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
    assert_eq!(rec.sha256, sha(NEW));
    assert_eq!(rec.key_id, f.keys.key_ids()[0]);
    let to = rec.to.clone().unwrap();
    assert_eq!(std::fs::read(&to.binary).unwrap(), NEW);
    let from = rec.from.clone().unwrap();
    assert_eq!(from.version, "0.1.0");
    assert_eq!(from.measured(), u.running().exe_sha256);
    let agent = rec.agent.clone().unwrap();
    assert_eq!(agent.pid, std::process::id());
    assert!(!agent.argv.is_empty());
    // The serial is remembered for this key.
    let acc: Acceptance = read_json(&f.dir.acceptance_file()).unwrap();
    assert_eq!(acc.highest[&f.keys.key_ids()[0]], 5);
    // A replay of the same assignment changes nothing.
    assert!(!u.consider(&a).await);
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 1);
    // Another release waits while this one is in progress.
    let m2 = f.manifest("0.3.0", 6, b"#!/bin/sh\n");
    assert!(!u.consider(&f.assignment(&m2, 2, Some(&f.secret))).await);
    assert_eq!(f.record().version, "0.2.0");
}

/// The host's state directory with a project `chat` that has a journal.
fn with_a_project(f: &Fixture) -> std::path::PathBuf {
    let state = f.t.path().join("state");
    let project = state.join("projects/chat");
    std::fs::create_dir_all(&project).unwrap();
    flotilla_store::Store::open(&project.join(flotilla_store::STATE_DB_FILE)).unwrap();
    state
}

#[tokio::test]
async fn the_hosts_projects_are_backed_up_before_a_release_is_staged() {
    use flotilla_store::backup::{retention, Kind};
    let f = Fixture::new();
    let state = with_a_project(&f);
    let u = f.updater_with(true, Some(Default::default()));
    let m = f.manifest("0.2.0", 5, NEW);
    assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
    assert_eq!(f.record().state, UpdateState::Staged);
    let archives = retention::archives(&state.join("backups"), Kind::Project, "chat").unwrap();
    assert_eq!(archives.len(), 1, "one backup, before the staging");
    let verified = flotilla_store::backup::verify(&archives[0]).unwrap();
    assert_eq!(verified.manifest.reason, "before-self-update");
    assert_eq!(verified.manifest.databases[0].path, "files/state.db");
}

#[tokio::test]
async fn a_backup_that_fails_refuses_the_update_and_stages_nothing() {
    let f = Fixture::new();
    let state = with_a_project(&f);
    // The backup directory cannot be made: a file is in its way.
    let blocked = state.join("not-a-dir");
    std::fs::write(&blocked, "").unwrap();
    let policy = flotilla_exec::backup::BackupPolicy {
        dir: Some(blocked.join("backups")),
        keep: 10,
    };
    let u = f.updater_with(true, Some(policy));
    let m = f.manifest("0.2.0", 5, NEW);
    let a = f.assignment(&m, 1, Some(&f.secret));
    refused(&f, &u, &a, Reason::InstallFailed).await;
    let why = f.record().detail;
    assert!(why.contains("the backup before the update failed"), "{why}");
}

/// Serves `body` to every request on a loopback port; the URL.
async fn serve(body: Vec<u8>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/artifact", l.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf).await;
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes()).await;
                let _ = c.write_all(&body).await;
            });
        }
    });
    url
}

#[tokio::test]
async fn an_artifact_named_by_url_is_fetched_and_checked() {
    let f = Fixture::new();
    let u = f.updater(true);
    let mut m = f.manifest("0.2.0", 5, NEW);
    m.artifacts[0].blob = None;
    m.artifacts[0].url = Some(serve(NEW.to_vec()).await);
    assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Staged, "{rec:#?}");
    assert_eq!(std::fs::read(&rec.to.unwrap().binary).unwrap(), NEW);
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_url_that_sends_more_than_the_manifest_says_is_refused() {
    let f = Fixture::new();
    let u = f.updater(true);
    let mut m = f.manifest("0.2.0", 5, NEW);
    m.artifacts[0].blob = None;
    let mut more = NEW.to_vec();
    more.extend_from_slice(&[b'x'; 100_000]);
    m.artifacts[0].url = Some(serve(more).await);
    refused(
        &f,
        &u,
        &f.assignment(&m, 1, Some(&f.secret)),
        Reason::SizeMismatch,
    )
    .await;
}

#[tokio::test]
async fn a_skipped_version_is_never_applied_again() {
    let f = Fixture::new();
    let u = f.updater(true);
    f.root
        .add_skip(flotilla_release::SkipEntry {
            name: AGENT_RELEASE.into(),
            version: "0.2.0".into(),
            sha256: sha(NEW),
            reason: Reason::CrashLoop,
            at_ms: 1,
        })
        .unwrap();
    let m = f.manifest("0.2.0", 5, NEW);
    refused(
        &f,
        &u,
        &f.assignment(&m, 7, Some(&f.secret)),
        Reason::Skipped,
    )
    .await;
    assert!(f.record().detail.contains("CrashLoop"));
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_release_already_running_is_updated_without_a_restart() {
    let f = Fixture::new();
    let u = f.updater(true);
    let me = std::fs::read(flotilla_exec::sys::self_exe().unwrap()).unwrap();
    let m = f.manifest("0.1.0", 5, &me);
    assert!(u.consider(&f.assignment(&m, 1, Some(&f.secret))).await);
    let rec = f.record();
    assert_eq!(rec.state, UpdateState::Updated);
    assert_eq!(f.fake.downloads.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn every_start_writes_running_then_reported_once_the_report_is_accepted() {
    let f = Fixture::new();
    let u = f.updater(true);
    let running: Running = read_json(&f.dir.running_file()).unwrap();
    assert_eq!(running.pid, std::process::id());
    assert_eq!(&running, u.running());
    assert!(read_json::<Reported>(&f.dir.reported_file()).is_none());
    let reported = f.dir.reported_file();
    let done = async {
        while read_json::<Reported>(&reported).is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), u.run(done))
        .await
        .unwrap();
    let r: Reported = read_json(&reported).unwrap();
    assert_eq!(r.pid, running.pid);
    assert_eq!(r.exe_sha256, running.exe_sha256);
    let reports = f.fake.reports.lock().unwrap();
    assert_eq!(
        reports[0].running_sha256.as_ref(),
        Some(&running.exe_sha256)
    );
    assert_eq!(reports[0].pid, Some(running.pid));
}
