//! Backups with real parts: real SQLite files written by a second connection while
//! they are backed up, archives restored and compared file by file, archives cut
//! short, altered or from a newer version refused with nothing changed, the
//! automatic backup before a migration of an authority's database, and an authority
//! on the test PostgreSQL (`eval "$(scripts/postgres)"`, which sets
//! `FLOTILLA_TEST_POSTGRES_URL`; the PostgreSQL tests FAIL without it) dumped,
//! verified, and restored into a fresh database with the same rows.

use flotilla_store::authority::{
    testing, AuthorityStore, PostgresAuthority, Principal, SqliteAuthority, AUTHORITY_DB_FILE,
    AUTHORITY_SCHEMA_VERSION,
};
use flotilla_store::backup::{
    self, manifest, BackupError, Engine, Kind, Manifest, PgTools, Postgres, Request,
};
use flotilla_store::schema::{HookError, PendingMigration};
use flotilla_store::{NewOperation, Store, StoreError, STATE_DB_FILE};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const T0: i64 = 1_796_121_663_120;

fn op(n: i64) -> NewOperation {
    NewOperation {
        verb: "start".into(),
        target: format!("c{n}"),
        flags: vec![],
        plan_digest: "sha256:00".into(),
        topology_digest: "sha256:00".into(),
        plan_json: "{}".into(),
        who: "test@host".into(),
        pid: 1,
        command_line: "flotilla up".into(),
        started_at_ms: T0 + n,
    }
}

/// A project's state directory: a journal with `ops` operations, a log, a
/// systemd environment file (0600), an empty directory, a symbolic link and the
/// lifecycle lock.
fn project(dir: &Path, ops: i64) {
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::create_dir_all(dir.join("run/empty")).unwrap();
    let mut store = Store::open(&dir.join(STATE_DB_FILE)).unwrap();
    for n in 0..ops {
        store.begin_operation(&op(n)).unwrap();
    }
    std::fs::write(
        dir.join("logs/llm.log"),
        "2026-12-01T10:41:03.120Z stdout F ready\n",
    )
    .unwrap();
    std::fs::write(dir.join("run/llm.env"), "A=1\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(
        dir.join("run/llm.env"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::write(dir.join("run/lifecycle.lock"), "{}").unwrap();
    std::os::unix::fs::symlink("logs/llm.log", dir.join("latest.log")).unwrap();
}

fn request<'a>(source: &'a Path, to: &'a Path, now_ms: i64, keep: usize) -> Request<'a> {
    Request {
        kind: Kind::Project,
        name: "chat",
        source,
        to,
        now_ms,
        reason: "manual",
        keep,
    }
}

/// Every entry under `dir` (relative path → what it is: a file's bytes and mode,
/// `dir`, a link's target), lock files and SQLite's companions left out, databases
/// as their operations' targets.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(
                    rel,
                    format!("-> {}", std::fs::read_link(&p).unwrap().display()),
                );
            } else if meta.is_dir() {
                out.insert(rel, "dir".into());
                walk(root, &p, out);
            } else if rel.ends_with(".lock") || rel.ends_with("-wal") || rel.ends_with("-shm") {
            } else if rel.ends_with(".db") {
                let store = Store::open(&p).unwrap();
                let targets: Vec<String> = store
                    .operations(10_000)
                    .unwrap()
                    .into_iter()
                    .map(|o| o.target)
                    .collect();
                out.insert(rel, targets.join(","));
            } else {
                out.insert(
                    rel,
                    format!(
                        "{:o} {}",
                        meta.permissions().mode() & 0o777,
                        String::from_utf8_lossy(&std::fs::read(&p).unwrap())
                    ),
                );
            }
        }
    }
    walk(dir, dir, &mut out);
    out
}

#[test]
fn a_backup_taken_while_a_writer_writes_is_consistent_verifies_and_restores() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("projects/chat");
    project(&dir, 5);
    let db = dir.join(STATE_DB_FILE);
    // A second connection writes operations as fast as it can, each its own
    // transaction, before, during and after the backup.
    let written = Arc::new(AtomicI64::new(5));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (db, written, stop) = (db.clone(), written.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut store = Store::open(&db).unwrap();
            while !stop.load(Ordering::SeqCst) {
                let n = written.load(Ordering::SeqCst);
                store.begin_operation(&op(n)).unwrap();
                written.store(n + 1, Ordering::SeqCst);
            }
        })
    };
    assert!(flotilla_testkit::wait_until(
        Duration::from_secs(20),
        || { written.load(Ordering::SeqCst) >= 200 }
    ));
    let before = written.load(Ordering::SeqCst);
    let to = base.path().join("backups");
    let done = backup::create(&request(&dir, &to, T0, 10)).unwrap();
    let after_backup = written.load(Ordering::SeqCst);
    // The writer goes on after the backup: it was never blocked.
    assert!(flotilla_testkit::wait_until(
        Duration::from_secs(20),
        || { written.load(Ordering::SeqCst) >= after_backup + 100 }
    ));
    stop.store(true, Ordering::SeqCst);
    writer.join().unwrap();

    assert_eq!(
        done.archive,
        to.join("project-chat-20261201T104103.120Z"),
        "named by what and when"
    );
    let m = &done.manifest;
    assert_eq!(
        (m.kind, m.name.as_str(), m.created_ms),
        (Kind::Project, "chat", T0)
    );
    assert_eq!(m.flotilla_version, backup::FLOTILLA_VERSION);
    let state = &m.databases[0];
    assert_eq!(state.path, "files/state.db");
    assert_eq!(state.schema.as_deref(), Some("state"));
    assert_eq!(state.schema_version, Some(flotilla_store::SCHEMA_VERSION));
    let counted = state.tables["operations"];
    assert!(
        counted >= before && counted <= after_backup,
        "the snapshot holds {counted} operations: between the {before} written before the backup began and the {after_backup} written when it ended"
    );
    let files: Vec<&str> = m.files.iter().map(|f| f.path.as_str()).collect();
    assert!(files.contains(&"files/logs/llm.log") && files.contains(&"files/latest.log"));
    assert!(!files
        .iter()
        .any(|f| f.ends_with("-wal") || f.ends_with(".lock")));
    assert!(m
        .skipped
        .iter()
        .any(|s| s.starts_with("run/lifecycle.lock")));
    assert!(
        !to.read_dir()
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with('.')),
        "no partial or scratch directory is left"
    );

    // Verified again from disk; the copy holds exactly operations 0..counted, in
    // order: one consistent snapshot, no torn write.
    let v = backup::verify(&done.archive).unwrap();
    assert_eq!(v.databases, 1);
    let restored_into = base.path().join("restored/chat");
    let r = backup::restore(&done.archive, &restored_into, Kind::Project, T0 + 1).unwrap();
    assert_eq!(r.previous, None, "nothing was there before");
    let store = Store::open(&restored_into.join(STATE_DB_FILE)).unwrap();
    let mut targets: Vec<i64> = store
        .operations(100_000)
        .unwrap()
        .iter()
        .map(|o| o.target[1..].parse().unwrap())
        .collect();
    targets.sort();
    assert_eq!(targets, (0..counted).collect::<Vec<_>>());
    // Everything else is as it was.
    let mut source = tree(&dir);
    let mut restored = tree(&restored_into);
    source.remove("state.db");
    restored.remove("state.db");
    assert_eq!(restored, source);
}

#[test]
fn restore_swaps_the_directory_and_keeps_the_previous_one() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("projects/chat");
    project(&dir, 3);
    let to = base.path().join("backups");
    let taken = backup::create(&request(&dir, &to, T0, 10)).unwrap();
    let at_backup = tree(&dir);
    // Changes after the backup.
    {
        let mut store = Store::open(&dir.join(STATE_DB_FILE)).unwrap();
        store.begin_operation(&op(99)).unwrap();
    }
    std::fs::write(dir.join("logs/new.log"), "later\n").unwrap();
    let changed = tree(&dir);
    assert_ne!(changed, at_backup);

    let r = backup::restore(&taken.archive, &dir, Kind::Project, T0 + 5_000).unwrap();
    let previous = base
        .path()
        .join("projects/chat.before-restore-20261201T104108.120Z");
    assert_eq!(r.previous.as_deref(), Some(previous.as_path()));
    assert_eq!(
        tree(&dir),
        at_backup,
        "the directory is as it was at backup time"
    );
    assert_eq!(
        tree(&previous),
        changed,
        "the state it replaced is kept whole"
    );
    let siblings: Vec<String> = std::fs::read_dir(base.path().join("projects"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        siblings.len(),
        2,
        "no temporary directory left: {siblings:?}"
    );
}

/// The archive and the target, byte for byte, to show a refusal changed nothing.
fn snapshot(paths: &[&Path]) -> Vec<BTreeMap<String, Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            if meta.is_dir() {
                out.insert(rel, b"dir".to_vec());
                walk(root, &p, out);
            } else if meta.is_file() {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    paths
        .iter()
        .map(|p| {
            let mut m = BTreeMap::new();
            walk(p, p, &mut m);
            m
        })
        .collect()
}

/// A project, its archive, then a change to the project (so a restore would show).
fn archived(base: &Path) -> (PathBuf, PathBuf) {
    let dir = base.join("projects/chat");
    project(&dir, 3);
    let to = base.join("backups");
    let taken = backup::create(&request(&dir, &to, T0, 10)).unwrap();
    let mut store = Store::open(&dir.join(STATE_DB_FILE)).unwrap();
    store.begin_operation(&op(50)).unwrap();
    drop(store);
    (dir, taken.archive)
}

fn refused(archive: &Path, dir: &Path) -> BackupError {
    let parent = dir.parent().unwrap();
    let before = snapshot(&[archive, parent]);
    let err = backup::restore(archive, dir, Kind::Project, T0 + 1).unwrap_err();
    assert!(err.is_refusal(), "a refusal: {err}");
    assert_eq!(snapshot(&[archive, parent]), before, "nothing changed");
    err
}

#[test]
fn a_truncated_archive_is_refused_and_nothing_changes() {
    let base = tempfile::tempdir().unwrap();
    let (dir, archive) = archived(base.path());
    let db = archive.join("files/state.db");
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = refused(&archive, &dir);
    let text = err.to_string();
    assert!(
        text.contains("files/state.db has")
            && text.contains(&format!("the manifest says {len} (cut short)")),
        "{text}"
    );
    // A file missing altogether, and a manifest missing (an archive cut short
    // before its manifest): refused too.
    std::fs::remove_file(&db).unwrap();
    assert!(
        matches!(refused(&archive, &dir), BackupError::Incomplete { what, .. } if what == "files/state.db")
    );
    std::fs::remove_file(archive.join(manifest::MANIFEST_FILE)).unwrap();
    let err = refused(&archive, &dir);
    assert!(
        err.to_string().contains("manifest.json is missing"),
        "{err}"
    );
}

#[test]
fn a_flipped_byte_is_refused_and_nothing_changes() {
    let base = tempfile::tempdir().unwrap();
    let (dir, archive) = archived(base.path());
    let flip = |p: &Path, at: usize| {
        let mut bytes = std::fs::read(p).unwrap();
        bytes[at] ^= 0x01;
        std::fs::write(p, bytes).unwrap();
    };
    // In a database (a page deep inside it).
    let db = archive.join("files/state.db");
    let len = std::fs::metadata(&db).unwrap().len() as usize;
    flip(&db, len - 100);
    let err = refused(&archive, &dir);
    assert!(
        matches!(&err, BackupError::Damaged { path, why, .. } if path == "files/state.db" && why.contains("SHA-256")),
        "{err}"
    );
    flip(&db, len - 100);
    backup::verify(&archive).expect("flipped back, it verifies again");
    // In the manifest: its own digest does not match.
    flip(&archive.join(manifest::MANIFEST_FILE), 40);
    let err = refused(&archive, &dir);
    assert!(matches!(err, BackupError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("manifest.sha256 says"), "{err}");
}

/// Rewrites `archive`'s manifest with `edit` and a matching digest (as a newer
/// Flotilla would have written it).
fn rewrite_manifest(archive: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = archive.join(manifest::MANIFEST_FILE);
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    let text = serde_json::to_string_pretty(&m).unwrap() + "\n";
    std::fs::write(&path, &text).unwrap();
    std::fs::write(
        archive.join(manifest::MANIFEST_DIGEST_FILE),
        flotilla_model::digest::sha256_hex(text.as_bytes()) + "\n",
    )
    .unwrap();
}

#[test]
fn an_archive_from_a_newer_flotilla_or_schema_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let (dir, archive) = archived(base.path());
    rewrite_manifest(&archive, |m| m["flotilla_version"] = "99.0.0".into());
    let err = refused(&archive, &dir);
    assert!(matches!(err, BackupError::TooNew { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!(
            "flotilla 99.0.0 (this is {})",
            backup::FLOTILLA_VERSION
        )),
        "{err}"
    );
    rewrite_manifest(&archive, |m| {
        m["flotilla_version"] = backup::FLOTILLA_VERSION.into();
        m["databases"][0]["schema_version"] = (flotilla_store::SCHEMA_VERSION + 1).into();
    });
    let err = refused(&archive, &dir);
    assert!(
        err.to_string().contains(&format!(
            "files/state.db has state schema version {} (this flotilla understands {})",
            flotilla_store::SCHEMA_VERSION + 1,
            flotilla_store::SCHEMA_VERSION
        )),
        "{err}"
    );
    rewrite_manifest(&archive, |m| {
        m["databases"][0]["schema_version"] = flotilla_store::SCHEMA_VERSION.into();
        m["kind"] = "authority".into();
    });
    let err = refused(&archive, &dir);
    assert!(err.to_string().contains("flotilla serve restore"), "{err}");
}

#[test]
fn a_row_count_that_differs_from_the_manifest_does_not_verify() {
    let base = tempfile::tempdir().unwrap();
    let (dir, archive) = archived(base.path());
    rewrite_manifest(&archive, |m| {
        m["databases"][0]["tables"]["operations"] = 4.into();
    });
    let err = refused(&archive, &dir);
    assert!(
        err.to_string()
            .contains("table operations has 3 rows, 4 at backup time"),
        "{err}"
    );
}

#[test]
fn retention_keeps_the_newest_archives_of_the_same_project() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("projects/chat");
    project(&dir, 1);
    let to = base.path().join("backups");
    let mut pruned = Vec::new();
    for i in 0..4 {
        pruned.push(
            backup::create(&request(&dir, &to, T0 + i * 1000, 2))
                .unwrap()
                .pruned,
        );
    }
    let names: Vec<String> = backup::retention::archives(&to, Kind::Project, "chat")
        .unwrap()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "project-chat-20261201T104105.120Z",
            "project-chat-20261201T104106.120Z"
        ]
    );
    assert_eq!(pruned[2], [to.join("project-chat-20261201T104103.120Z")]);
    // Two in the same millisecond: both kept, told apart.
    let again = backup::create(&request(&dir, &to, T0 + 3000, 0)).unwrap();
    assert_eq!(
        again.archive,
        to.join("project-chat-20261201T104106.120Z-2")
    );
}

#[test]
fn files_that_come_and_go_while_a_backup_runs_never_fail_it() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("projects/chat");
    project(&dir, 3);
    // Another program works in the directory throughout: it opens the journal and
    // closes it again (the last connection to close removes `state.db-wal` and
    // `state.db-shm`) and writes and removes a scratch file.
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicI64::new(0));
    let churn = {
        let (dir, stop, rounds) = (dir.clone(), stop.clone(), rounds.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                let store = Store::open(&dir.join(STATE_DB_FILE)).unwrap();
                std::fs::write(dir.join("logs/scratch.tmp"), "x").unwrap();
                drop(store);
                std::fs::remove_file(dir.join("logs/scratch.tmp")).unwrap();
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let to = base.path().join("backups");
    let mut taken = 0;
    // Backups until the churn has gone round many times beside them.
    while taken < 20 || rounds.load(Ordering::SeqCst) < 200 {
        let done = backup::create(&request(&dir, &to, T0 + taken, 2))
            .unwrap_or_else(|e| panic!("backup {taken} failed beside the churn: {e}"));
        backup::verify(&done.archive).unwrap();
        assert_eq!(done.manifest.databases.len(), 1);
        taken += 1;
        assert!(taken < 5_000, "the churn did not run");
    }
    stop.store(true, Ordering::SeqCst);
    churn.join().unwrap();
}

#[test]
fn a_backup_directory_inside_what_is_backed_up_is_left_out() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("projects/chat");
    project(&dir, 1);
    let to = dir.join("backups");
    let first = backup::create(&request(&dir, &to, T0, 10)).unwrap();
    let second = backup::create(&request(&dir, &to, T0 + 1, 10)).unwrap();
    for w in [&first, &second] {
        assert!(!w
            .manifest
            .files
            .iter()
            .any(|f| f.path.starts_with("files/backups")));
        assert!(w
            .manifest
            .skipped
            .contains(&"backups (the backup directory)".to_string()));
    }
    backup::verify(&second.archive).unwrap();
}

/// A backup of the authority's directory `dir` into `to`, before a migration.
fn before_migration<'a>(dir: &'a Path, to: &'a Path) -> Request<'a> {
    Request {
        kind: Kind::Authority,
        name: "authority",
        source: dir,
        to,
        now_ms: T0,
        reason: "before-migration",
        keep: 10,
    }
}

/// The hook `flotilla serve` gives the authority's store: a backup of the
/// authority's directory into `to`, reason `before-migration`.
fn backup_hook(
    dir: PathBuf,
    to: PathBuf,
    seen: Arc<std::sync::Mutex<Vec<PendingMigration>>>,
) -> impl Fn(&PendingMigration) -> Result<(), HookError> + Sync {
    move |pending: &PendingMigration| {
        seen.lock().unwrap().push(pending.clone());
        backup::create(&before_migration(&dir, &to))?;
        Ok(())
    }
}

#[test]
fn an_automatic_backup_is_taken_before_a_migration_of_the_authority() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("authority");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), "CA\n").unwrap();
    let db = dir.join(AUTHORITY_DB_FILE);
    // An older Flotilla's database (schema 2), holding data.
    testing::sqlite_authority_at_version(&db, 2).unwrap();
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute(
            "INSERT INTO agent_calls (host, call, created_ms) VALUES ('studio', '{}', 1)",
            [],
        )
        .unwrap();
    }
    let to = base.path().join("backups");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let hook = backup_hook(dir.clone(), to.clone(), seen.clone());
    let authority = SqliteAuthority::open_with(&db, Some(&hook)).unwrap();
    assert_eq!(
        *seen.lock().unwrap(),
        [PendingMigration {
            path: Some(db.clone()),
            found: 2,
            target: AUTHORITY_SCHEMA_VERSION
        }]
    );
    let archives = backup::retention::archives(&to, Kind::Authority, "authority").unwrap();
    assert_eq!(archives.len(), 1);
    let m = backup::verify(&archives[0]).unwrap().manifest;
    assert_eq!(m.reason, "before-migration");
    let authority_db = m
        .databases
        .iter()
        .find(|d| d.path == "files/authority.db")
        .unwrap();
    assert_eq!(
        (authority_db.schema.as_deref(), authority_db.schema_version),
        (Some("authority"), Some(2)),
        "the archive holds the database as it was before the migration"
    );
    assert_eq!(authority_db.tables["agent_calls"], 1);
    drop(authority);
    // Opened again (up to date now): no second backup.
    SqliteAuthority::open_with(&db, Some(&hook)).unwrap();
    assert_eq!(seen.lock().unwrap().len(), 1);

    // A backup that fails stops the migration: the database stays at schema 2.
    let old = base.path().join("old.db");
    testing::sqlite_authority_at_version(&old, 2).unwrap();
    let failing = |_: &PendingMigration| -> Result<(), HookError> {
        Err(Box::new(BackupError::NoSource {
            path: "/nonexistent".into(),
        }))
    };
    let err = SqliteAuthority::open_with(&old, Some(&failing)).unwrap_err();
    assert!(
        matches!(err, StoreError::BackupBeforeMigration { found: 2, .. }),
        "{err}"
    );
    let conn = rusqlite::Connection::open(&old).unwrap();
    let version: i64 = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 2, "nothing was migrated");
}

// --- PostgreSQL ---

/// `pg_dump` and `pg_restore` from `PATH` (the binary's implementation lives in
/// `flotilla_exec`, which this crate cannot depend on).
struct Tools;

impl PgTools for Tools {
    fn run(&self, program: &str, args: &[String], env: &[(String, String)]) -> Result<(), String> {
        let out = std::process::Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| format!("could not be run: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

fn pg(url: &str) -> Postgres {
    Postgres {
        url: url.to_string(),
        tools: Arc::new(Tools),
    }
}

/// Restores an authority archive into `dir` and the database at `url`.
async fn restore_pg(
    archive: &Path,
    dir: &Path,
    url: &str,
    now_ms: i64,
) -> Result<backup::Restored, BackupError> {
    backup::restore_with_postgres(archive, dir, Kind::Authority, Some(&pg(url)), now_ms).await
}

/// What the authority's calls and credentials hold, to compare two databases.
async fn contents(store: &PostgresAuthority) -> (u64, Vec<String>, Option<Principal>) {
    let last = store.last_call_id().await.unwrap();
    let mut calls = Vec::new();
    for id in 1..=last {
        calls.push(store.call(id).await.unwrap().unwrap().call);
    }
    let op = store.principal("hash-op".into()).await.unwrap();
    (last, calls, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_backup_verifies_and_restores_into_a_fresh_database_with_the_same_rows() {
    let admin = testing::admin_url();
    let source_db = testing::create_database(&admin).await.unwrap();
    let store = PostgresAuthority::connect(&source_db.url).await.unwrap();
    store
        .create_credential(
            "hash-op".into(),
            Principal::Operator {
                name: "operator".into(),
            },
            T0,
        )
        .await
        .unwrap();
    for i in 0..25 {
        store
            .enqueue_call("studio".into(), format!("{{\"n\":{i}}}"), T0 + i)
            .await
            .unwrap();
    }
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("authority");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("ca.pem"), "CA\n").unwrap();
    let to = base.path().join("backups");
    let req = Request {
        kind: Kind::Authority,
        name: "authority",
        source: &dir,
        to: &to,
        now_ms: T0,
        reason: "manual",
        keep: 10,
    };
    let taken = backup::create_with_postgres(&req, &pg(&source_db.url))
        .await
        .unwrap();
    let dump = taken
        .manifest
        .databases
        .iter()
        .find(|d| d.engine == Engine::Postgres)
        .unwrap();
    assert_eq!(dump.path, "postgres.dump");
    assert_eq!(dump.schema_version, Some(AUTHORITY_SCHEMA_VERSION));
    assert_eq!(dump.tables["agent_calls"], 25);
    assert_eq!(dump.tables["credentials"], 1);
    // Verified again against the server, from disk.
    backup::verify_with_postgres(&taken.archive, &pg(&source_db.url), T0 + 1)
        .await
        .unwrap();
    // A plain verify (no server) says what it needs.
    assert!(matches!(
        backup::verify(&taken.archive),
        Err(BackupError::Database { .. })
    ));

    // Into a fresh database (and a fresh directory).
    let fresh = testing::create_database(&admin).await.unwrap();
    testing::drop_database(&admin, &fresh.name).await.unwrap();
    let restored_dir = base.path().join("restored/authority");
    let r = restore_pg(&taken.archive, &restored_dir, &fresh.url, T0 + 2)
        .await
        .unwrap();
    assert_eq!(r.previous, None);
    let swapped = r.database.unwrap();
    assert_eq!(
        (swapped.database.as_str(), swapped.previous),
        (fresh.name.as_str(), None)
    );
    assert_eq!(
        std::fs::read_to_string(restored_dir.join("ca.pem")).unwrap(),
        "CA\n"
    );
    let restored = PostgresAuthority::connect(&fresh.url).await.unwrap();
    let expected = contents(&store).await;
    assert_eq!(expected.0, 25);
    assert_eq!(contents(&restored).await, expected, "the same rows");
    drop(restored);

    // Over the source database while the authority is connected to it: refused.
    store
        .enqueue_call("studio".into(), "{\"after\":true}".into(), T0 + 100)
        .await
        .unwrap();
    let err = restore_pg(&taken.archive, &dir, &source_db.url, T0 + 3)
        .await
        .unwrap_err();
    assert!(matches!(err, BackupError::InUse { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(dir.join("ca.pem")).unwrap(), "CA\n");
    assert_eq!(store.last_call_id().await.unwrap(), 26, "nothing changed");
    // Once the authority is gone, it is swapped in; the previous database is kept.
    // Its pool's sessions end on the server a moment after the drop: the restore
    // waits until the server shows none left on the database (within a deadline).
    drop(store);
    std::fs::write(dir.join("ca.pem"), "CA 2\n").unwrap();
    let (watcher, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let left = flotilla_testkit::wait_until_async(Duration::from_secs(10), || async {
        watcher
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                &[&source_db.name],
            )
            .await
            .is_ok_and(|row| row.get::<_, i64>(0) == 0)
    })
    .await;
    assert!(
        left,
        "the dropped authority's sessions never left the database"
    );
    drop(watcher);
    let r = restore_pg(&taken.archive, &dir, &source_db.url, T0 + 4)
        .await
        .unwrap();
    let previous = r.database.unwrap().previous.unwrap();
    assert!(
        previous.ends_with(&format!("_before_restore_{}", T0 + 4)),
        "{previous}"
    );
    assert_eq!(std::fs::read_to_string(dir.join("ca.pem")).unwrap(), "CA\n");
    assert_eq!(
        std::fs::read_to_string(r.previous.unwrap().join("ca.pem")).unwrap(),
        "CA 2\n"
    );
    let back = PostgresAuthority::connect(&source_db.url).await.unwrap();
    assert_eq!(back.last_call_id().await.unwrap(), 25, "as at backup time");
    drop(back);
    for db in [&source_db.name, &fresh.name, &previous] {
        testing::drop_database(&admin, db).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_automatic_backup_is_taken_before_a_migration_of_a_postgres_authority() {
    let admin = testing::admin_url();
    let db = testing::create_database(&admin).await.unwrap();
    testing::postgres_authority_at_version(&db.url, 2)
        .await
        .unwrap();
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("authority");
    std::fs::create_dir_all(&dir).unwrap();
    let to = base.path().join("backups");
    let hook = {
        let (url, dir, to) = (db.url.clone(), dir.clone(), to.clone());
        move |pending: PendingMigration| -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<(), HookError>> + Send>,
        > {
            let (url, dir, to) = (url.clone(), dir.clone(), to.clone());
            Box::pin(async move {
                assert_eq!(
                    (pending.found, pending.target),
                    (2, AUTHORITY_SCHEMA_VERSION)
                );
                backup::create_with_postgres(&before_migration(&dir, &to), &pg(&url)).await?;
                Ok(())
            })
        }
    };
    let store = PostgresAuthority::connect_with(&db.url, Some(&hook))
        .await
        .unwrap();
    assert_eq!(
        store.schema_version().await.unwrap(),
        AUTHORITY_SCHEMA_VERSION
    );
    let archives = backup::retention::archives(&to, Kind::Authority, "authority").unwrap();
    assert_eq!(archives.len(), 1);
    let m: Manifest = backup::verify_with_postgres(&archives[0], &pg(&db.url), T0 + 1)
        .await
        .unwrap()
        .manifest;
    let dump = m
        .databases
        .iter()
        .find(|d| d.engine == Engine::Postgres)
        .unwrap();
    assert_eq!(
        dump.schema_version,
        Some(2),
        "the database as it was before"
    );
    drop(store);
    testing::drop_database(&admin, &db.name).await.unwrap();
}
