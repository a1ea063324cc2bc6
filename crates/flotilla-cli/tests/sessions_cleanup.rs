//! Deleting sessions through a real authority, verified by measurement: what a
//! delete reports freed is what was on disk, the directories and the mirror's
//! pins are gone, the rows (events, questions, credentials) with them; a running
//! session is deleted only with `--force` (its sandbox killed first); a symbolic
//! link the agent planted is removed, never followed; `[retention] after` deletes
//! idle sessions on its own, never a running one, and a mirror no session uses
//! goes after `[retention] mirror_grace`.
//!
//! The runtime program is the stand-in agent of `tests/sessions.rs` (records its
//! arguments and credential, then waits), in bubblewrap as the session's own uid.

mod common;

use common::sessions::{git, SessionsAuthority};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The stand-in agent (as in `tests/sessions.rs`): records its arguments, its
/// prompt and its credential in its home, leaves a transcript, then waits.
const FAKE_AGENT: &str = r#"#!/bin/sh
printf '%s\n' "$@" >> "$HOME/args"
cat >> "$HOME/args"
echo >> "$HOME/args"
prev=
for a in "$@"; do
  if [ "$prev" = --session-id ]; then
    mkdir -p "$HOME/.claude/projects/-tree" && : > "$HOME/.claude/projects/-tree/$a.jsonl"
  fi
  prev=$a
done
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
exec sleep 600
"#;

/// An authority whose runtime is the stand-in agent, with `runtime` lines in its
/// `[runtime]` table and `extra` appended to `sessions.toml`.
fn authority(runtime: &str, extra: &str) -> (SessionsAuthority, tempfile::TempDir) {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let p = bin.path().join("fake-agent");
    std::fs::write(&p, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    (SessionsAuthority::new(&p, &[], runtime, extra), bin)
}

fn alive(pid: u64) -> bool {
    flotilla_exec::process_start_ticks(pid as u32).is_some()
}

fn session_dir(s: &SessionsAuthority, id: u64) -> PathBuf {
    s.a.ws.path().join(format!("sessions/{id}"))
}

fn mirror(s: &SessionsAuthority) -> PathBuf {
    s.a.ws.path().join("sessions/mirrors/infra.git")
}

/// The pins in the mirror (`git for-each-ref refs/flotilla/sessions/`).
fn pins(s: &SessionsAuthority) -> Vec<String> {
    git(
        &mirror(s),
        &[
            "for-each-ref",
            "--format=%(refname)",
            "refs/flotilla/sessions/",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect()
}

/// Waits until session `id`'s runtime wrote its credential (it runs); its pid.
fn running(s: &SessionsAuthority, id: u64) -> u64 {
    let token = session_dir(s, id).join("home/token");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || token.exists()),
        "session {id}'s runtime never started: {:#}",
        s.show(id)
    );
    let shown = s.wait_state(id, "working", Duration::from_secs(30));
    shown["doc"]["runtime"]["pid"].as_u64().unwrap()
}

/// Bytes and files under `dir`, never following a link (the test's own count).
fn du(dir: &Path) -> (u64, u64) {
    let (mut bytes, mut files) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            bytes += meta.len();
            files += 1;
        }
    }
    (bytes, files)
}

/// A session's questions, from `flotilla questions --json`.
fn questions_of(s: &SessionsAuthority, id: u64) -> Vec<serde_json::Value> {
    let r = s.run(&["questions", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    r.json()["questions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["session"] == id)
        .cloned()
        .collect()
}

/// Asks the gate, with session credential `token`, about `git push origin main`
/// (always asked: a question opens); the decision.
fn ask_push(s: &SessionsAuthority, token: &str) -> String {
    let op: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.a.dir.join("operator.json")).unwrap()).unwrap();
    let c = flotilla_api::Client::new(
        &s.a.url,
        op["ca_pem"].as_str().unwrap(),
        Some(token.to_string()),
    )
    .unwrap();
    let payload = serde_json::json!({
        "session_id": "00000000-0000-4000-8000-000000000000",
        "transcript_path": "/dev/null",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "git push origin main", "description": "d"},
        "tool_use_id": "toolu_01"
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bytes = rt
        .block_on(c.post_bytes(
            "/v1/gate/hook",
            payload.to_string().into_bytes(),
            Duration::from_secs(30),
        ))
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A session that is gone: `show` and `events` fail (404: exit 2, "no session").
fn assert_gone(s: &SessionsAuthority, id: u64) {
    for cmd in ["show", "events"] {
        let r = s.run(&["session", cmd, &id.to_string()]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains(&format!("no session {id}")), "{r:?}");
    }
    assert!(!session_dir(s, id).exists());
}

#[test]
fn deleting_20_sessions_frees_the_disk_their_trees_used_measured() {
    const N: usize = 20;
    const WRITTEN: usize = 256 * 1024;
    let (s, _bin) = authority("max_runtimes = 20", "");
    let ids: Vec<u64> = (0..N)
        .map(|i| s.create(&["--prompt", &format!("task {i}")]))
        .collect();
    for &id in &ids {
        running(&s, id);
        // Work of the agent's: bytes in its tree (written as root here).
        let tree = session_dir(&s, id).join("tree");
        std::fs::create_dir_all(tree.join("build")).unwrap();
        std::fs::write(tree.join("build/out.bin"), vec![7u8; WRITTEN]).unwrap();
        for f in 0..10 {
            std::fs::write(tree.join(format!("build/f{f}.txt")), "x".repeat(1000)).unwrap();
        }
    }
    assert_eq!(pins(&s).len(), N, "{:?}", pins(&s));
    for &id in &ids {
        let r = s.run(&["session", "stop", &id.to_string()]);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let mut freed_total = 0;
    for (n, &id) in ids.iter().enumerate() {
        let dir = session_dir(&s, id);
        let (bytes, files) = du(&dir);
        assert!(bytes >= (WRITTEN + 10_000) as u64, "{bytes}");
        if n == 0 {
            // A human's line: what was freed, measured.
            let r = s.run(&["session", "delete", &id.to_string()]);
            assert_eq!(r.code, 0, "{r:?}");
            assert!(
                r.stdout
                    .starts_with(&format!("session {id} deleted: freed ")),
                "{r:?}"
            );
            assert!(r.stdout.contains("(tree, home, run, 1 transcript"), "{r:?}");
            assert!(r.stdout.trim_end().ends_with("pin dropped"), "{r:?}");
        } else {
            let r = s.run(&["session", "delete", &id.to_string(), "--json"]);
            assert_eq!(r.code, 0, "{r:?}");
            let rep = r.json();
            assert_eq!(rep["id"], id);
            let freed = rep["freed_bytes"].as_u64().unwrap();
            assert!(freed >= (WRITTEN + 10_000) as u64, "{rep:#}");
            // What it measured is what was there (the stand-in wrote nothing since).
            assert_eq!(freed, bytes, "{rep:#}");
            assert_eq!(rep["freed_files"].as_u64().unwrap(), files, "{rep:#}");
            assert_eq!(rep["pin_dropped"], true, "{rep:#}");
            assert_eq!(
                rep["refs_dropped"][0],
                format!("refs/flotilla/sessions/{id}")
            );
            let removed: Vec<&str> = rep["removed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap())
                .collect();
            let tree = dir.join("tree").display().to_string();
            let whole = dir.display().to_string();
            assert!(removed.contains(&tree.as_str()), "{rep:#}");
            assert!(removed.contains(&whole.as_str()), "{rep:#}");
            assert!(rep["events"].as_u64().unwrap() >= 3, "{rep:#}");
            assert!(rep["credentials"].as_u64().unwrap() >= 1, "{rep:#}");
            freed_total += freed;
        }
        assert!(!dir.exists(), "{} is still there", dir.display());
        assert!(!pins(&s).contains(&format!("refs/flotilla/sessions/{id}")));
    }
    assert!(freed_total >= ((N - 1) * WRITTEN) as u64);
    // Each delete is also one line of the authority's log, with the same report.
    let log = std::fs::read_to_string(s.a.log()).unwrap();
    for &id in &ids {
        let line = log
            .lines()
            .find(|l| l.contains(&format!("cleanup: session {id} deleted (operator ")))
            .unwrap_or_else(|| panic!("no log line for session {id}: {log}"));
        let report: serde_json::Value =
            serde_json::from_str(line.split_once("): ").unwrap().1).unwrap();
        assert_eq!(report["id"], id);
        assert!(
            report["freed_bytes"].as_u64().unwrap() >= WRITTEN as u64,
            "{line}"
        );
    }
    assert!(pins(&s).is_empty(), "{:?}", pins(&s));
    for &id in &ids {
        assert_gone(&s, id);
        assert!(questions_of(&s, id).is_empty());
    }
    let list = s.run(&["session", "list", "--json"]);
    assert_eq!(list.json()["sessions"], serde_json::json!([]), "{list:?}");
    // Only the mirror is left in the sessions directory (kept for its grace).
    let left: Vec<String> = std::fs::read_dir(s.a.ws.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["mirrors".to_string()], "{left:?}");
    // Deleting again: no such session (exit 2, as `session show`).
    let r = s.run(&["session", "delete", &ids[0].to_string()]);
    assert_eq!(r.code, 2, "{r:?}");
}

#[test]
fn a_running_session_is_deleted_only_with_force_and_a_planted_link_is_never_followed() {
    let (s, _bin) = authority("", "");
    let id = s.create(&["--prompt", "work"]);
    let pid = running(&s, id);
    let token = std::fs::read_to_string(session_dir(&s, id).join("home/token"))
        .unwrap()
        .trim()
        .to_string();
    // A question of the session's, open.
    assert_eq!(ask_push(&s, &token), "defer");
    assert_eq!(questions_of(&s, id).len(), 1);

    // Links to outside, as an agent could plant them in its home and tree.
    let outside = tempfile::tempdir().unwrap();
    let precious = outside.path().join("precious.txt");
    std::fs::write(&precious, "keep me\n").unwrap();
    std::fs::create_dir(outside.path().join("dir")).unwrap();
    std::fs::write(outside.path().join("dir/inner.txt"), "keep me too\n").unwrap();
    let home = session_dir(&s, id).join("home");
    std::os::unix::fs::symlink(&precious, home.join("link-to-file")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("dir"), home.join("link-to-dir")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("dir"),
        session_dir(&s, id).join("tree/link-to-dir"),
    )
    .unwrap();

    // And a FIFO where the tree's alternates were (reading it would wait forever).
    let alternates = session_dir(&s, id).join("tree/.git/objects/info/alternates");
    std::fs::remove_file(&alternates).unwrap();
    nix::unistd::mkfifo(&alternates, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();

    // Refused while it runs: nothing changes.
    let r = s.run(&["session", "delete", &id.to_string()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("refused") && r.stderr.contains("--force"),
        "{r:?}"
    );
    let r = s.run(&["session", "delete", &id.to_string(), "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "running", "{r:?}");
    assert!(alive(pid));
    assert!(session_dir(&s, id).join("tree/README.md").exists());
    assert_eq!(s.show(id)["state"], "working");

    // With --force: the sandbox is killed first, then everything goes.
    let r = s.run(&["session", "delete", &id.to_string(), "--force", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rep = r.json();
    assert_eq!(rep["runtime_killed"], pid, "{rep:#}");
    assert!(!alive(pid), "bwrap {pid} still runs");
    assert_eq!(rep["pin_dropped"], true, "{rep:#}");
    assert_eq!(rep["questions"], 1, "{rep:#}");
    assert!(rep["freed_files"].as_u64().unwrap() >= 3, "{rep:#}");
    assert_gone(&s, id);
    assert!(questions_of(&s, id).is_empty());
    // What the links pointed at is untouched.
    assert_eq!(std::fs::read_to_string(&precious).unwrap(), "keep me\n");
    assert_eq!(
        std::fs::read_to_string(outside.path().join("dir/inner.txt")).unwrap(),
        "keep me too\n"
    );
    // Its credential is revoked: the gate denies it.
    assert_eq!(ask_push(&s, &token), "deny");
    assert!(pins(&s).is_empty());

    // A session that never ran is a row only: deleted, nothing freed, said so.
    let new = s.create(&[]);
    let r = s.run(&["session", "delete", &new.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout.trim(),
        format!("session {new} deleted: freed 0 B in 0 files")
    );
    assert_gone(&s, new);
}

#[test]
fn retention_deletes_idle_sessions_never_a_running_one_then_the_unused_mirror() {
    let (s, _bin) = authority("", "[retention]\nafter = \"1s\"\nmirror_grace = \"0s\"\n");
    let busy = s.create(&["--prompt", "long work"]);
    let busy_pid = running(&s, busy);
    let idle = s.create(&["--prompt", "short work"]);
    running(&s, idle);
    let r = s.run(&["session", "stop", &idle.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(session_dir(&s, idle).exists());

    // The reconciler's pass deletes the idle one (1 s after its last activity).
    let deleted = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        s.run(&["session", "show", &idle.to_string()]).code == 2
    });
    assert!(
        deleted,
        "session {idle} was never deleted: {:#}",
        s.show(idle)
    );
    assert_gone(&s, idle);
    // The busy one was as old at that pass, and runs: kept, with its files and pin.
    let shown = s.show(busy);
    assert_eq!(shown["state"], "working", "{shown:#}");
    assert!(alive(busy_pid));
    assert!(session_dir(&s, busy).join("tree/README.md").exists());
    assert_eq!(pins(&s), vec![format!("refs/flotilla/sessions/{busy}")]);
    assert!(mirror(&s).exists(), "a pinned mirror is kept");

    // Stopped, it goes too; then the mirror no session uses.
    let r = s.run(&["session", "stop", &busy.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    let gone = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        !session_dir(&s, busy).exists() && !mirror(&s).exists()
    });
    assert!(
        gone,
        "session {busy} or the mirror is still there: {:?}",
        std::fs::read_dir(s.a.ws.path().join("sessions"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect::<Vec<_>>()
    );
    assert_gone(&s, busy);
    let log = std::fs::read_to_string(s.a.log()).unwrap();
    assert!(
        log.contains(&format!("cleanup: session {idle} deleted (retention)")),
        "{log}"
    );
    assert!(
        log.contains("cleanup: mirror of infra removed (no session uses it)"),
        "{log}"
    );
}

/// Clears the immutable attribute of a file when dropped (so the test's temporary
/// directory can go even when an assertion fails).
struct Mutable(PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&self.0)
            .status();
    }
}

#[test]
fn a_delete_that_cannot_remove_everything_fails_naming_what_remains_and_keeps_the_session() {
    let (s, _bin) = authority("", "");
    let id = s.create(&["--prompt", "work"]);
    running(&s, id);
    assert_eq!(s.run(&["session", "stop", &id.to_string()]).code, 0);
    // A file even root cannot unlink (an immutable file, `chattr +i`).
    let stuck = session_dir(&s, id).join("home/stuck.bin");
    std::fs::write(&stuck, vec![1u8; 4096]).unwrap();
    let chattr = std::process::Command::new("chattr")
        .arg("+i")
        .arg(&stuck)
        .status()
        .unwrap();
    assert!(chattr.success());
    let guard = Mutable(stuck.clone());

    let r = s.run(&["session", "delete", &id.to_string()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("not deleted"), "{r:?}");
    assert!(r.stderr.contains(&stuck.display().to_string()), "{r:?}");
    assert!(
        r.stderr.contains("4096 byte(s) in 1 file(s) remain"),
        "{r:?}"
    );
    let r = s.run(&["session", "delete", &id.to_string(), "--json"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(r.json()["error"]["code"], "cleanup-incomplete", "{r:?}");
    // Not reported deleted: the session and its events are still there.
    assert!(s.show(id)["doc"].is_object());
    assert!(!s.events(id).is_empty());
    assert!(stuck.exists());
    let log = std::fs::read_to_string(s.a.log()).unwrap();
    assert!(
        log.contains(&format!(
            "cleanup: session {id} is not deleted: 4096 byte(s)"
        )),
        "{log}"
    );

    // Once it can go, the same delete completes.
    drop(guard);
    let r = s.run(&["session", "delete", &id.to_string(), "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let rep = r.json();
    assert_eq!(rep["freed_bytes"], 4096, "{rep:#}");
    assert_eq!(rep["freed_files"], 1, "{rep:#}");
    assert_gone(&s, id);
    assert!(pins(&s).is_empty());
}

#[test]
fn bad_retention_settings_are_refused_at_start_with_line_and_column() {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = bin.path().join("fake-agent");
    std::fs::write(&agent, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
    // (the `[retention]` lines, what the error says, its line:column)
    let cases = [
        (
            "after = \"0s\"",
            "[retention] after must be at least 1s",
            "7:1",
        ),
        ("after = \"a month\"", "is not a duration", "7:9"),
        ("mirror_grace = \"soon\"", "is not a duration", "7:16"),
        ("keep = \"30d\"", "unknown field `keep`", "7:1"),
    ];
    for (line, expected, at) in cases {
        let ws = common::Workspace::new();
        let dir = ws.path().join("authority");
        let init = common::run_with_env(
            ws.path(),
            &["serve", "init"],
            &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
        );
        assert_eq!(init.code, 0, "{init:?}");
        let text = format!(
            "[runtime]\nclaude = {:?}\n\n[repos.infra]\nurl = \"https://example.invalid/x.git\"\n[retention]\n{line}\n",
            agent.display().to_string()
        );
        std::fs::write(dir.join("sessions.toml"), &text).unwrap();
        let port = common::authority::free_port();
        let r = common::run_with_env(
            ws.path(),
            &["serve", "--listen", &format!("127.0.0.1:{port}")],
            &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
        );
        assert_ne!(r.code, 0, "{line}: {r:?}");
        assert!(r.stderr.contains(expected), "{line}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("sessions.toml: {at}: ")),
            "{line}: not at {at}: {}",
            r.stderr
        );
    }
}
