//! `flotilla backup` / `restore` and `flotilla serve backup` / `serve restore`, end to
//! end with the real binary: a project's journal backed up and restored (refused
//! while its components run or another invocation holds its lock; an archive cut
//! short, altered or from a newer version refused with nothing changed), a running
//! authority backed up and restored once it is stopped (refused while it runs), the
//! automatic backup before a migration of an old authority database, and an
//! authority on the test PostgreSQL (`eval "$(scripts/postgres)"`; FAILS without
//! `FLOTILLA_TEST_POSTGRES_URL`) restored into a fresh database that a new `flotilla
//! serve` then answers from.

mod common;

use common::authority::{free_port, Authority};
use common::{project_dir, run_with_env, KillOnDrop, Run, Workspace, SLEEPER};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file under `dir` with its bytes (lock files and SQLite's companions left
/// out): to show that a refusal changed nothing.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().display().to_string();
            if p.is_dir() {
                walk(root, &p, out);
            } else if !rel.ends_with(".lock") && !rel.ends_with("-shm") {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn archive_of(r: &Run) -> PathBuf {
    assert_eq!(r.code, 0, "{r:?}");
    PathBuf::from(r.json()["archive"].as_str().unwrap())
}

fn operations(ws: &Workspace) -> usize {
    let r = ws.run(&["operations", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json().as_array().unwrap().len()
}

#[test]
fn a_project_is_backed_up_and_restored_only_when_nothing_uses_it() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", SLEEPER);
    let r = ws.run(&["start", "sleeper"]);
    assert_eq!(r.code, 0, "{r:?}");
    let state = ws.path().join(".flotilla-state");
    let project = project_dir(&state, ws.path());
    let b = ws.run(&["backup", "--json"]);
    let archive = archive_of(&b);
    assert_eq!(archive.parent().unwrap(), state.join("backups"));
    let m = &b.json()["manifest"];
    assert_eq!(m["kind"], "project");
    assert_eq!(m["databases"][0]["tables"]["operations"], 1);
    assert_eq!(m["databases"][0]["tables"]["instances"], 1);

    // In use: its component still runs.
    let r = ws.run(&["restore", archive.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("components it started that still run (sleeper (pid"),
        "{}",
        r.stderr
    );
    let r = ws.run(&["stop", "sleeper"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(operations(&ws), 2);
    // In use: another invocation holds the project's lifecycle lock.
    let before = files(&project);
    {
        let holder = flotilla_exec::lock::LockHolder {
            pid: 4242,
            command: "flotilla up chat".into(),
            since_ms: 1_796_121_663_120,
        };
        let _held = flotilla_exec::lock::LifecycleLock::acquire(&project, &holder).unwrap();
        let r = ws.run(&["restore", archive.to_str().unwrap()]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr
                .contains("is in use by pid 4242 (`flotilla up chat`)"),
            "{}",
            r.stderr
        );
    }
    assert_eq!(files(&project), before, "nothing changed");

    let r = ws.run(&["restore", archive.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("the state it replaced is kept in"),
        "{}",
        r.stdout
    );
    assert_eq!(
        operations(&ws),
        1,
        "the journal as it was at the backup: the start only"
    );
    let kept: Vec<PathBuf> = std::fs::read_dir(project.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".before-restore-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
}

/// Rewrites an archive's manifest (and its digest) as a newer flotilla would.
fn rewrite_manifest(archive: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = archive.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut m);
    let text = serde_json::to_string_pretty(&m).unwrap() + "\n";
    std::fs::write(&path, &text).unwrap();
    std::fs::write(
        archive.join("manifest.sha256"),
        flotilla_model::digest::sha256_hex(text.as_bytes()) + "\n",
    )
    .unwrap();
}

#[test]
fn an_archive_cut_short_altered_or_from_a_newer_flotilla_is_refused_and_nothing_changes() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", SLEEPER);
    assert_eq!(ws.run(&["start", "sleeper"]).code, 0);
    assert_eq!(ws.run(&["stop", "sleeper"]).code, 0);
    let project = project_dir(&ws.path().join(".flotilla-state"), ws.path());
    let good = archive_of(&ws.run(&["backup", "--json"]));
    let copy = |name: &str| {
        let to = ws.path().join(name);
        let r = std::process::Command::new("cp")
            .args(["-a"])
            .arg(&good)
            .arg(&to)
            .status()
            .unwrap();
        assert!(r.success());
        to
    };
    let refused = |archive: &Path, says: &str| {
        let before = (files(&project), files(archive));
        let r = ws.run(&["restore", archive.to_str().unwrap(), "--json"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains(says), "{says}: {}", r.stderr);
        assert_eq!(r.json()["error"]["kind"], "refused");
        assert_eq!((files(&project), files(archive)), before, "nothing changed");
    };
    let cut = copy("cut");
    let db = cut.join("files/state.db");
    let len = std::fs::metadata(&db).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&db)
        .unwrap()
        .set_len(len - 1024)
        .unwrap();
    refused(&cut, "(cut short)");
    let flipped = copy("flipped");
    let log = flipped.join("files/logs/sleeper.log");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes[0] ^= 0x20;
    std::fs::write(&log, bytes).unwrap();
    refused(&flipped, "files/logs/sleeper.log has SHA-256");
    let newer = copy("newer");
    rewrite_manifest(&newer, |m| m["flotilla_version"] = "99.0.0".into());
    refused(&newer, "comes from a newer flotilla: flotilla 99.0.0");
    // The intact one restores.
    let r = ws.run(&["restore", good.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    // No archive there, or a project with no state: usage errors.
    let r = ws.run(&["restore", "no-such-archive"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("there is no archive at no-such-archive"),
        "{}",
        r.stderr
    );
    let r = ws.run(&["-p", "nothing-here", "backup"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("nothing to back up"), "{}", r.stderr);
}

const FLEET: &str = r#"
[hosts.gpu]
transport = "agent"

[components.llm]
adapter = "process"
host = "gpu"
command = ["sleep", "600"]
"#;

fn revisions(a: &Authority) -> usize {
    let r = a.run(&["config", "history", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["revisions"].as_array().unwrap().len()
}

#[test]
fn a_running_authority_is_backed_up_and_restored_once_it_is_stopped() {
    let mut a = Authority::new(FLEET);
    assert_eq!(a.publish(&[]).code, 0);
    // While it serves (the online backup API: no pause).
    let b = a.run(&["serve", "backup", "--json"]);
    let archive = archive_of(&b);
    assert_eq!(archive.parent().unwrap(), a.ws.path().join("backups"));
    let dbs = &b.json()["manifest"]["databases"];
    let db = dbs
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "files/authority.db")
        .unwrap();
    assert_eq!(db["tables"]["revisions"], 1);
    let files_kept: Vec<String> = b.json()["manifest"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .collect();
    for f in ["files/ca.key", "files/operator.json", "files/server.pem"] {
        assert!(files_kept.iter().any(|k| k == f), "{f}: {files_kept:?}");
    }
    a.ws.write("fleet/flotilla.toml", &FLEET.replace("600", "601"));
    assert_eq!(a.publish(&[]).code, 0);
    assert_eq!(revisions(&a), 2);

    let r = a.run(&["serve", "restore", archive.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains(&format!("is in use by pid {}", a.pid().unwrap()))
            && r.stderr.contains("flotilla serve --listen"),
        "{}",
        r.stderr
    );
    // A project's restore refuses an authority's archive, naming the right command.
    let r = a.run(&["-p", "x", "restore", archive.to_str().unwrap()]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("flotilla serve restore"), "{}", r.stderr);

    a.kill9();
    let r = a.run(&["serve", "restore", archive.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    a.start();
    assert_eq!(revisions(&a), 1, "the authority as it was at the backup");
}

#[test]
fn an_old_authority_database_is_backed_up_before_it_is_migrated() {
    let ws = Workspace::new();
    let dir = ws.path().join("authority");
    std::fs::create_dir_all(&dir).unwrap();
    flotilla_store::authority::testing::sqlite_authority_at_version(&dir.join("authority.db"), 2)
        .unwrap();
    let r = ws.run(&["serve", "init", "--authority-dir", dir.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{r:?}");
    let backups: Vec<PathBuf> = std::fs::read_dir(ws.path().join("backups"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(backups.len(), 1, "{backups:?}");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(backups[0].join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["reason"], "before-migration");
    let db = m["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["path"] == "files/authority.db")
        .unwrap();
    assert_eq!(db["schema_version"], 2, "as it was before the migration");
    let conn = rusqlite::Connection::open(dir.join("authority.db")).unwrap();
    let now: i64 = conn
        .query_row("SELECT MAX(version) FROM schema_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(now, flotilla_store::authority::AUTHORITY_SCHEMA_VERSION);
}

#[test]
fn an_authority_on_postgres_is_restored_into_a_fresh_database_that_serves() {
    let admin = flotilla_store::authority::testing::admin_url();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let source = rt
        .block_on(flotilla_store::authority::testing::create_database(&admin))
        .unwrap();
    let fresh = rt
        .block_on(flotilla_store::authority::testing::create_database(&admin))
        .unwrap();
    rt.block_on(flotilla_store::authority::testing::drop_database(
        &admin,
        &fresh.name,
    ))
    .unwrap();
    let ws = Workspace::new();
    let run = |args: &[&str], dir: &str, url: &str| -> Run {
        let dir = ws.path().join(dir).display().to_string();
        run_with_env(
            ws.path(),
            args,
            &[
                ("FLOTILLA_AUTHORITY_DIR", &dir),
                ("FLOTILLA_DATABASE_URL", url),
            ],
        )
    };
    assert_eq!(run(&["serve", "init"], "a", &source.url).code, 0);
    let b = run(&["serve", "backup", "--json"], "a", &source.url);
    let archive = archive_of(&b);
    let dump = b.json()["manifest"]["databases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["engine"] == "postgres")
        .cloned()
        .unwrap();
    assert_eq!(dump["tables"]["credentials"], 1, "the operator credential");
    // Without a database to restore the dump into: a usage error.
    let r = run_with_env(
        ws.path(),
        &[
            "serve",
            "restore",
            archive.to_str().unwrap(),
            "--authority-dir",
            "b",
        ],
        &[],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("holds a PostgreSQL dump"), "{}", r.stderr);
    let r = run(
        &["serve", "restore", archive.to_str().unwrap()],
        "b",
        &fresh.url,
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("created from the dump"), "{}", r.stdout);

    // A new authority on the restored directory and database knows the operator.
    let port = free_port();
    let dir = ws.path().join("b");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(ws.path())
        .env("FLOTILLA_STATE_DIR", ws.path().join(".flotilla-state"))
        .env("FLOTILLA_AUTHORITY_DIR", &dir)
        .env("FLOTILLA_DATABASE_URL", &fresh.url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _guard = KillOnDrop(child.id());
    let operator = dir.join("operator.json").display().to_string();
    let server = format!("https://127.0.0.1:{port}");
    common::authority::assert_answers(ws.path(), &server, &operator);
    drop(_guard);
    child.wait().unwrap();
    for db in [&source.name, &fresh.name] {
        rt.block_on(flotilla_store::authority::testing::drop_database(
            &admin, db,
        ))
        .unwrap();
    }
}
