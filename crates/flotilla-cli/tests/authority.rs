//! `flotilla serve` and `flotilla config` as a user runs them: a real authority
//! process on loopback, revisions published from an inventory, history, diff,
//! compare-and-swap selection, `kill -9` of the authority mid-publish, and no secret
//! value anywhere the authority keeps or answers.

mod common;

use common::authority::{Authority, CANARY};
use common::{run_with_env, Workspace};
use std::path::Path;
use std::process::{Command, Stdio};

const INVENTORY: &str = r#"
[hosts.studio]
transport = "agent"

[components.model]
host = "studio"
command = ["llama-server", "--port", "18080"]
env = { API_KEY = { secret = "MODEL_KEY" } }

[components.proxy]
host = "studio"
command = ["proxy", "--port", "18081"]
depends_on = ["model"]
"#;

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from));
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn publish_history_diff_select() {
    let a = Authority::new(INVENTORY);
    let first = a.publish(&["--json"]);
    assert_eq!(first.code, 0, "{first:?}");
    let first = first.json();
    let r1 = first["revision"].as_str().unwrap().to_string();
    assert!(r1.starts_with("sha256:") && first["changed"] == true);

    // The same content again: the same revision, nothing changes.
    let again = a.publish(&[]);
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again.stdout.contains("already selected"),
        "{}",
        again.stdout
    );

    let inv = a.ws.path().join("fleet/flotilla.toml");
    edit(&inv, "\"18080\"", "\"18090\"");
    let second = a.publish(&["--expect", &r1, "--json"]).json();
    let r2 = second["revision"].as_str().unwrap().to_string();
    assert_ne!(r1, r2);

    // A stale --expect is refused, naming the current revision, and stores nothing.
    edit(&inv, "\"18081\"", "\"18082\"");
    let stale = a.publish(&["--expect", &r1]);
    assert_eq!(stale.code, 1, "{stale:?}");
    assert!(stale.stderr.contains(&r2), "{}", stale.stderr);
    let h = a.run(&["config", "history", "--json"]).json();
    assert_eq!(h["revisions"].as_array().unwrap().len(), 2, "{h}");

    // Diff says what changed, per component; a short prefix names a revision.
    let d = a.run(&["config", "diff", &r1[..15], &r2]);
    assert_eq!(d.code, 0, "{d:?}");
    assert!(d.stdout.contains("changed component model"), "{}", d.stdout);
    assert!(
        d.stdout.contains("18080") && d.stdout.contains("18090"),
        "{}",
        d.stdout
    );
    assert!(!d.stdout.contains("proxy"), "{}", d.stdout);

    // Roll back with compare-and-swap.
    let wrong = a.run(&["config", "select", &r1, "--expect", &r1]);
    assert_eq!(wrong.code, 1, "{wrong:?}");
    let back = a.run(&["config", "select", &r1, "--expect", &r2]);
    assert_eq!(back.code, 0, "{back:?}");
    let h = a.run(&["config", "history", "--json"]).json();
    assert_eq!(h["selections"][0]["revision"], r1.as_str());

    let shown = a.run(&["config", "show", &r1]);
    assert_eq!(shown.code, 0, "{shown:?}");
    assert!(
        shown.stdout.contains("MODEL_KEY"),
        "the secret's name is there"
    );

    // No secret value in anything the authority keeps or answers.
    let mut everything = std::fs::read(a.db()).unwrap();
    for f in ["authority.db-wal", "authority.db-shm"] {
        everything.extend(std::fs::read(a.dir.join(f)).unwrap_or_default());
    }
    let said = [
        shown.stdout,
        a.run(&["config", "history", "--json"]).stdout,
        a.run(&["config", "show", &r2]).stdout,
    ]
    .join("\n");
    everything.extend(said.as_bytes());
    assert!(
        !everything
            .windows(CANARY.len())
            .any(|w| w == CANARY.as_bytes()),
        "the canary secret leaked into the authority"
    );
}

#[test]
fn kill_9_during_publish_leaves_each_revision_whole_or_absent() {
    let mut a = Authority::new(INVENTORY);
    let inv = a.ws.path().join("fleet/flotilla.toml");
    let mut port = 18080;
    for round in 0..4 {
        // A publish in flight, and the authority killed under it: at once in the
        // first round, then after more of the request has had a chance to arrive.
        let next = port + 1;
        edit(&inv, &format!("\"{port}\""), &format!("\"{next}\""));
        port = next;
        let env = a.env();
        let mut publish = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        publish
            .args(["-f", "fleet/flotilla.toml", "config", "publish"])
            .current_dir(a.ws.path())
            .env("FLOTILLA_STATE_DIR", a.ws.path().join(".flotilla-state"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &env {
            publish.env(k, v);
        }
        let publish = publish.spawn().unwrap();
        for _ in 0..round * 20_000 {
            std::hint::spin_loop();
        }
        a.kill9();
        let out = publish.wait_with_output().unwrap();
        a.start();
        let h = a.run(&["config", "history", "--json"]).json();
        let revisions = h["revisions"].as_array().unwrap();
        // Every revision listed is whole: it shows, and its content hashes to its name.
        for r in revisions {
            let rev = r["revision"].as_str().unwrap();
            let shown = a.run(&["config", "show", rev]);
            assert_eq!(shown.code, 0, "{shown:?}");
        }
        // The selection names a revision that exists.
        if let Some(sel) = h["selections"].as_array().unwrap().first() {
            assert!(revisions.iter().any(|r| r["revision"] == sel["revision"]));
        }
        // An acknowledged publish is never lost.
        if out.status.success() {
            let said = String::from_utf8_lossy(&out.stdout);
            let rev = said
                .split_whitespace()
                .find(|w| w.starts_with("sha256:"))
                .unwrap();
            assert!(
                revisions.iter().any(|r| r["revision"] == rev),
                "acknowledged {rev} lost: {h}"
            );
        }
    }
    // And it still works: publishing now succeeds.
    let ok = a.publish(&[]);
    assert_eq!(ok.code, 0, "{ok:?}");
}

#[test]
fn serve_without_init_says_what_to_do() {
    let ws = Workspace::new();
    let r = run_with_env(
        ws.path(),
        &["serve", "--listen", "127.0.0.1:0"],
        &[(
            "FLOTILLA_AUTHORITY_DIR",
            ws.path().join("nowhere").to_str().unwrap(),
        )],
    );
    // No CA to read: a runtime failure, with what to do.
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("flotilla serve init"), "{}", r.stderr);
}

#[test]
fn a_second_serve_on_the_same_directory_is_refused_naming_the_first() {
    let mut a = Authority::new(INVENTORY);
    let pid = a.pid().unwrap();
    let other = format!("127.0.0.1:{}", common::authority::free_port());
    let second = a.run(&["serve", "--listen", &other]);
    assert_ne!(second.code, 0, "{second:?}");
    assert!(
        second
            .stderr
            .contains("another flotilla serve uses the authority directory")
            && second.stderr.contains(&format!("pid {pid}")),
        "{}",
        second.stderr
    );
    // The first one still answers; once it is gone (even by kill -9) the directory
    // is free again.
    assert_eq!(a.run(&["config", "history", "--json"]).code, 0);
    a.kill9();
    a.start();
    assert_eq!(a.run(&["config", "history", "--json"]).code, 0);
}
