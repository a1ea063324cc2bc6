//! `flotilla ui [OBJECT]`: the dashboard page's URL under the authority's, printed
//! or handed to the browser (`$BROWSER` here: a script that records its argument).

mod common;

use common::Workspace;

#[test]
fn print_gives_the_objects_url_under_the_server() {
    let ws = Workspace::new();
    let r = common::run_with_env(
        ws.path(),
        &["ui", "component/llama server", "--print"],
        &[("FLOTILLA_SERVER", "https://fleet.example:8443/")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stdout,
        "https://fleet.example:8443/ui/components/llama%20server\n"
    );
    let r = ws.run(&["ui", "--print", "--server", "https://a:1"]);
    assert_eq!(r.stdout, "https://a:1/ui/\n", "{r:?}");
    let r = ws.run(&["ui", "question/7", "--print"]);
    assert_eq!(r.stdout, "https://127.0.0.1:7443/ui/questions/7\n", "{r:?}");
}

#[test]
fn a_bad_object_is_a_usage_error_naming_the_kinds() {
    let ws = Workspace::new();
    for bad in ["question/x", "nope/1", "host"] {
        let r = ws.run(&["ui", bad, "--print"]);
        assert_eq!(r.code, 2, "{bad}: {r:?}");
        assert!(r.stdout.is_empty(), "{r:?}");
        assert!(
            r.stderr
                .contains(&format!("`{bad}` names no dashboard page"))
                && r.stderr.contains("component/NAME")
                && r.stderr.contains("question/ID"),
            "{r:?}"
        );
    }
}

#[test]
fn the_browser_gets_the_url_or_it_is_printed() {
    use std::os::unix::fs::PermissionsExt as _;
    let ws = Workspace::new();
    let got = ws.path().join("got");
    let script = ws.write(
        "browser",
        &format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}\n", got.display()),
    );
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = common::run_with_env(
        ws.path(),
        &["ui", "rollout/3", "--server", "https://a:1"],
        &[("BROWSER", script.to_str().unwrap())],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&got).unwrap(),
        "https://a:1/ui/rollouts/3\n"
    );
    assert!(r.stdout.is_empty(), "opened, not printed: {r:?}");
    // No $BROWSER and no display: printed, saying why.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"));
    let out = cmd
        .args(["ui", "alerts", "--server", "https://a:1"])
        .env_remove("BROWSER")
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env("FLOTILLA_STATE_DIR", ws.path().join("state"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "https://a:1/ui/alerts\n"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("no display"));
}
