//! The binary's log (`-v`, `FLOTILLA_LOG`, `--log-format json`), as it reaches standard
//! error, from the real binary.

mod common;

use common::authority::Authority;
use common::{run_with_env, Workspace};

use common::SLEEPER as INVENTORY;

#[test]
fn flotilla_log_debug_shows_the_operation_and_its_steps() {
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    let quiet = w.run(&["start", "sleeper"]);
    assert_eq!(quiet.code, 0, "{quiet:?}");
    assert!(
        !quiet.stderr.contains("step{"),
        "no spans without -v or FLOTILLA_LOG: {}",
        quiet.stderr
    );
    let r = run_with_env(
        w.path(),
        &["restart", "sleeper"],
        &[("FLOTILLA_LOG", "debug")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    // The operation's span, each step's inside it (with the step's fields), and each
    // span's close with its timing.
    let op = r
        .stderr
        .lines()
        .find(|l| l.contains("operation{operation=op-"))
        .unwrap_or_else(|| panic!("no operation span: {}", r.stderr));
    assert!(op.contains("operation{operation=op-2}"), "{op}");
    assert!(
        r.stderr.contains(
            "step{operation=op-2 wave=1 action=\"restart\" component=\"sleeper\" host=\"local\"}"
        ),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("close time.busy="), "{}", r.stderr);
    // -vv says the same.
    let vv = w.run(&["stop", "sleeper", "-vv"]);
    assert_eq!(vv.code, 0, "{vv:?}");
    assert!(vv.stderr.contains("action=\"stop\""), "{}", vv.stderr);
}

#[test]
fn a_bad_flotilla_log_is_named_and_the_default_used() {
    let w = Workspace::new();
    w.write("flotilla.toml", INVENTORY);
    let r = run_with_env(w.path(), &["validate"], &[("FLOTILLA_LOG", "=[")]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("warning: FLOTILLA_LOG="), "{}", r.stderr);
}

#[test]
fn serve_writes_one_json_object_per_log_line() {
    let a = Authority::with(
        "[hosts.edge]\ntransport = \"agent\"\n",
        &["--log-format", "json", "-v"],
    );
    // Requests, with a request id of the caller's own.
    let r = a.run(&["config", "history", "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let mut requests = 0;
    let wait = flotilla_testkit::wait_until(std::time::Duration::from_secs(30), || {
        let log = std::fs::read_to_string(a.log()).unwrap_or_default();
        requests = 0;
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
            assert!(v["timestamp"].is_string(), "{line}");
            assert!(v["level"].is_string(), "{line}");
            if v["span"]["name"] == "http" {
                assert!(v["span"]["request_id"].is_string(), "{line}");
                assert!(v["span"]["route"].is_string(), "{line}");
                requests += 1;
            }
        }
        requests > 0
    });
    assert!(
        wait,
        "no http span in the log:\n{}",
        std::fs::read_to_string(a.log()).unwrap_or_default()
    );
}
