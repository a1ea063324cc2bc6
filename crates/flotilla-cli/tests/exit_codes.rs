//! Exit statuses, one test each, from the real binary: 0 success, 1 refused or not as
//! desired, 2 usage and invalid inventories, 3 runtime failures; under `--json` a
//! failure is one JSON object on standard output.

mod common;

use common::authority::Authority;
use common::{run_with_env, Workspace};

use common::SLEEPER as INVENTORY;

/// The one JSON error object a failure prints under `--json`.
fn error_object(stdout: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}): {stdout}"));
    assert!(v["error"]["message"].is_string(), "{v}");
    assert!(v["error"]["causes"].is_array(), "{v}");
    v
}

#[test]
fn an_unreachable_authority_exits_3_and_says_how_to_start_one() {
    // An operator credential, but nothing listens where --server points.
    let a = Authority::initialised("[hosts.edge]\ntransport = \"agent\"\n", &[]);
    let op = a.dir.join("operator.json");
    let env = [("FLOTILLA_OPERATOR_FILE", op.to_str().unwrap())];
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    let r = run_with_env(
        w.path(),
        &["status", "--server", "https://127.0.0.1:1"],
        &env,
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("the authority cannot be reached")
            && r.stderr.contains("`flotilla serve`"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("Connection refused"), "{}", r.stderr);
    // The request's URL is said once.
    assert_eq!(
        r.stderr.matches("https://127.0.0.1:1/").count(),
        1,
        "{}",
        r.stderr
    );
    let j = run_with_env(
        w.path(),
        &["status", "--server", "https://127.0.0.1:1", "--json"],
        &env,
    );
    assert_eq!(j.code, 3, "{j:?}");
    let v = error_object(&j.stdout);
    assert_eq!(v["error"]["code"], 3);
    assert_eq!(v["error"]["kind"], "failure");
    assert!(
        v["error"]["causes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c.as_str().unwrap().contains("Connection refused")),
        "{v}"
    );
}

#[test]
fn something_that_is_not_the_authority_is_not_called_unreachable() {
    let a = Authority::initialised("[hosts.edge]\ntransport = \"agent\"\n", &[]);
    let op = a.dir.join("operator.json");
    let env = [("FLOTILLA_OPERATOR_FILE", op.to_str().unwrap())];
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    // A plain-text server where the authority should be: the TLS handshake fails.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let _ = std::io::Write::write_all(&mut s, b"HTTP/1.0 200 OK\r\n\r\nhello\n");
        }
    });
    let url = format!("https://127.0.0.1:{port}");
    let r = run_with_env(w.path(), &["status", "--server", &url], &env);
    let _ = server.join();
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr.contains("not as the authority whose CA is pinned"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("cannot be reached"), "{}", r.stderr);
}

#[test]
fn a_state_directory_that_cannot_be_written_exits_3() {
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    // A regular file where the state directory should be.
    let file = w.write("not-a-dir", "");
    let r = run_with_env(
        w.path(),
        &["start", "sleeper", "--json"],
        &[("FLOTILLA_STATE_DIR", file.to_str().unwrap())],
    );
    assert_eq!(r.code, 3, "{r:?}");
    let v = error_object(r.stdout.lines().last().unwrap_or_default());
    assert_eq!(v["error"]["code"], 3);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is not a directory"),
        "{v}"
    );
}

#[test]
fn a_journal_that_cannot_be_read_is_an_error_not_nothing_running() {
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    // The state directory is there, but its projects cannot be looked into.
    let base = w.path().join("state");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("projects"), "").unwrap();
    let r = run_with_env(
        w.path(),
        &["status"],
        &[("FLOTILLA_STATE_DIR", base.to_str().unwrap())],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(r.stderr.contains("cannot use state directory"), "{r:?}");
    assert!(!r.stdout.contains("stopped"), "{r:?}");
}

#[test]
fn an_invalid_or_missing_inventory_and_a_bad_argument_exit_2() {
    let w = Workspace::new();
    w.write("flotilla.toml", "[components.x]\nadapter = \"process\"\n");
    let r = w.run(&["validate"]);
    assert_eq!(r.code, 2, "{r:?}");
    // Under --json an invalid inventory is the promised error object, with each
    // diagnostic at its file:line:column.
    let r = w.run(&["status", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let v = error_object(&r.stdout);
    assert_eq!(v["error"]["kind"], "usage", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is invalid"),
        "{v}"
    );
    let first = &v["error"]["diagnostics"][0];
    assert_eq!(first["location"]["start"]["line"], 1, "{v}");
    // So is a host that is not one the verb can use.
    w.write(
        "flotilla.toml",
        "[hosts.local]\n[components.x]\ncommand = [\"sleep\", \"60\"]\n",
    );
    let r = w.run(&["host", "uninstall", "local", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let v = error_object(&r.stdout);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("is this machine"),
        "{v}"
    );
    let empty = Workspace::new();
    let r = empty.run(&["status", "--json"]);
    assert_eq!(r.code, 2, "{r:?}");
    let v = error_object(&r.stdout);
    assert_eq!(v["error"]["code"], 2);
    assert_eq!(v["error"]["kind"], "usage");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no inventory found"),
        "{v}"
    );
    let r = empty.run(&[
        "release",
        "manifest",
        "x",
        "1.0",
        "--serial",
        "1",
        "--expires",
        "0s",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("--expires `0s`"), "{}", r.stderr);
}

#[test]
fn not_as_desired_exits_1_and_success_0() {
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    let r = w.run(&["start", "sleeper"]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = w.run(&["status"]);
    assert_eq!(r.code, 0, "{r:?}");
    // Killed behind Flotilla's back: not as desired.
    let s = w.run(&["status", "--json"]);
    let pid = s.json()["components"][0]["runtime_identity"]["measured"]["pid"]
        .as_u64()
        .unwrap_or_else(|| panic!("{}", s.stdout)) as u32;
    common::kill9(pid);
    assert!(flotilla_testkit::wait_until(
        std::time::Duration::from_secs(30),
        || !flotilla_testkit::alive(pid)
    ));
    let r = w.run(&["status"]);
    assert_eq!(r.code, 1, "a component down unexpectedly: {r:?}");
    let r = w.run(&["stop", "sleeper"]);
    assert_eq!(r.code, 0, "{r:?}");
}
