//! `flotilla check`: pre-flight findings before anything starts — missing programs,
//! missing files named in a command, unreadable `env_file`s, missing secrets, busy
//! ports — each naming the component; exit 1 until they are fixed, 0 after.

mod common;

#[test]
fn check_finds_what_would_make_a_start_fail_before_anything_starts() {
    let ws = common::Workspace::new();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_port = busy.local_addr().unwrap().port();
    let free = flotilla_testkit::free_port();
    let kit = flotilla_testkit::binary();
    let inventory = |fixed: bool| {
        format!(
            "[components.ghost]\ncommand = [{ghost:?}]\n\
             [components.llm]\ncommand = [{kit:?}, \"--model\", \"./models/small.gguf\"]\n\
             env_file = \"llm.env\"\nenv = {{ TOKEN = {{ secret = \"FLOTILLA_CHECK_TEST_TOKEN\" }} }}\n\
             endpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n",
            ghost = if fixed { "true" } else { "no-such-program-flotilla" },
            port = if fixed { free } else { busy_port },
        )
    };
    ws.write("flotilla.toml", &inventory(false));
    let run = ws.run(&["check"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let out = &run.stdout;
    for want in [
        "ghost: program",
        "no-such-program-flotilla",
        "llm: file",
        "models/small.gguf does not exist",
        "llm: environment",
        "llm.env",
        // A missing env_file does not hide the missing secret behind it.
        "FLOTILLA_CHECK_TEST_TOKEN",
        &format!("llm: port {busy_port}"),
        "busy:",
        "problem(s)",
    ] {
        assert!(out.contains(want), "missing `{want}` in:\n{out}");
    }
    // Nothing was started or journaled.
    assert!(!ws.path().join(".flotilla-state/projects").exists());

    // Fixed: all checks pass.
    ws.write("flotilla.toml", &inventory(true));
    ws.write("models/small.gguf", "GGUF");
    ws.write("llm.env", "MODEL=small\n");
    let run = common::run_with_env(
        ws.path(),
        &["check", "--json"],
        &[("FLOTILLA_CHECK_TEST_TOKEN", "x")],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let json = run.json();
    assert_eq!(json[0]["host"], "local", "{json:#}");
    assert!(json[0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["ok"] == true));
    // `host check local` is the same pre-flight for this machine.
    let run = common::run_with_env(
        ws.path(),
        &["host", "check", "local"],
        &[("FLOTILLA_CHECK_TEST_TOKEN", "x")],
    );
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("all checks passed"), "{}", run.stdout);
    drop(busy);
}

/// A component whose owner cannot exist on this host (launchd off macOS): `check`
/// fails it saying why, and a plan refuses naming the owner, instead of "wait until
/// it settles" (it never would).
#[test]
fn an_owner_that_cannot_run_here_fails_check_and_the_plan_says_why() {
    let ws = common::Workspace::new();
    ws.write(
        "flotilla.toml",
        "[components.svc]\nadapter = \"launchd\"\nlaunchd = { label = \"com.example.svc\" }\ncommand = [\"/bin/sleep\", \"300\"]\n[stacks.s]\ncomponents = [\"svc\"]\n",
    );
    let env = [("FLOTILLA_STATE_DIR", "state"), ("FLOTILLA_LAUNCHCTL", "")];
    let run = common::run_with_env(ws.path(), &["check"], &env);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("svc: owner") && run.stdout.contains("launchd runs only on macOS"),
        "{}",
        run.stdout
    );
    let status = common::run_with_env(ws.path(), &["status", "--json"], &env);
    assert!(
        status.stdout.contains("\"owner_error\""),
        "{}",
        status.stdout
    );
    let plan = common::run_with_env(ws.path(), &["plan", "start", "svc"], &env);
    assert_eq!(plan.code, 1, "{}\n{}", plan.stdout, plan.stderr);
    let said = format!("{}{}", plan.stdout, plan.stderr);
    assert!(
        said.contains("its owner cannot be asked") && said.contains("launchd runs only on macOS"),
        "{said}"
    );
    assert!(!said.contains("wait until it settles"), "{said}");
    // `up` of its stack is refused as typed, not as the `start` it stands for.
    let up = common::run_with_env(ws.path(), &["up", "s"], &env);
    assert_eq!(up.code, 1, "{}\n{}", up.stdout, up.stderr);
    assert!(
        up.stderr.contains("flotilla up s: refused"),
        "{}",
        up.stderr
    );
    assert!(!up.stderr.contains("flotilla start s"), "{}", up.stderr);
}
