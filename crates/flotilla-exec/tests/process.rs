//! The process adapter against real processes: start, identity, stop (with and without
//! escalation), pid-reuse refusal, listeners, log handling.

mod common;

use common::*;
use flotilla_exec::identity::{self, argv_digest, IdentityMatch, Staleness};
use flotilla_exec::process::{self, StopOutcome};
use flotilla_exec::ExecError;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

#[test]
fn start_appends_stdout_and_stderr_to_the_log_with_env_and_cwd() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(
        dir.path(),
        "shell",
        "sh",
        &[
            "-c",
            "echo \"to-stdout $FLOT_TEST_VAR\"; echo to-stderr >&2; pwd; echo done; exec sleep 30",
        ],
    );
    s.env.push(("FLOT_TEST_VAR".into(), "from-spec".into()));
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::write(&s.log_path, "old run\n").unwrap();
    let run = Running::start(&s);
    assert_eq!(
        run.started.log_start_offset, 8,
        "offset after the old content"
    );
    wait_for_line(&run.log, "done");
    let log = std::fs::read_to_string(&run.log).unwrap();
    assert!(
        log.starts_with("old run\n"),
        "appended, not truncated: {log}"
    );
    assert!(log.contains("to-stdout from-spec"), "{log}");
    assert!(log.contains("to-stderr"), "{log}");
    assert!(
        log.contains(&dir.path().canonicalize().unwrap().display().to_string()),
        "{log}"
    );
    // Own session and process group.
    let id = &run.started.identity;
    assert_eq!(id.pgid, id.pid as i32);
    let sid = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(id.pid as i32))).unwrap();
    assert_eq!(sid.as_raw(), id.pid as i32);
}

#[test]
fn missing_or_unexecutable_programs_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = process::start(&spec(d, "web", "no-such-program-flotilla-xyz", &[])).unwrap_err();
    assert!(matches!(err, ExecError::ProgramNotFound { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("web") && msg.contains("no-such-program-flotilla-xyz") && msg.contains("PATH"),
        "{msg}"
    );

    let err = process::start(&spec(d, "web", "./bin/missing", &[])).unwrap_err();
    assert!(matches!(err, ExecError::ProgramMissing { .. }), "{err}");
    assert!(err
        .to_string()
        .contains(&d.join("./bin/missing").display().to_string()));

    let script = d.join("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    let err = process::start(&spec(d, "web", "./script.sh", &[])).unwrap_err();
    assert!(matches!(err, ExecError::NotExecutable { .. }), "{err}");
    assert!(err.to_string().contains("chmod +x"), "{err}");

    std::fs::create_dir(d.join("adir")).unwrap();
    let err = process::start(&spec(d, "web", "./adir", &[])).unwrap_err();
    assert!(err.to_string().contains("directory"), "{err}");

    let mut s = spec(d, "web", "sh", &[]);
    s.cwd = d.join("nope");
    let err = process::start(&s).unwrap_err();
    assert!(matches!(err, ExecError::BadCwd { .. }), "{err}");

    // A component PATH is searched instead of ours.
    let mut s = spec(d, "web", "sh", &[]);
    s.env
        .push(("PATH".into(), d.join("empty").display().to_string()));
    let err = process::start(&s).unwrap_err();
    assert!(
        err.to_string()
            .contains(&d.join("empty").display().to_string()),
        "{err}"
    );
    // Nothing was logged for failed starts, and no log file was created.
    assert!(!d.join("logs/web.log").exists());
}

#[test]
fn identity_is_measured_from_the_running_process() {
    let dir = tempfile::tempdir().unwrap();
    let kit = testkit();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let run = start_testkit(dir.path(), "kit", &["--listen", &listen]);
    let id = run.started.identity.clone();
    assert_eq!(id.exe, kit.canonicalize().unwrap());
    assert_eq!(
        Some(id.exe_sha256.clone()),
        identity::exe_on_disk_sha256(&kit).unwrap()
    );
    assert!(id.exe_sha256.starts_with("sha256:") && id.exe_sha256.len() == 71);
    let kit_str = kit.to_str().unwrap();
    assert_eq!(id.argv_digest, argv_digest(&[kit_str, "--listen", &listen]));
    assert!(id.start_time_ticks > 0);
    // Independent read of field 22.
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", id.pid)).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let field22: u64 = after.split(' ').nth(19).unwrap().parse().unwrap();
    assert_eq!(id.start_time_ticks, field22);
    // Measuring again gives the same identity; serialisation is snake_case.
    assert_eq!(identity::measure(id.pid).unwrap().as_ref(), Some(&id));
    let json = serde_json::to_value(&id).unwrap();
    for key in [
        "pid",
        "pgid",
        "start_time_ticks",
        "exe",
        "exe_sha256",
        "argv_digest",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(identity::staleness(&id).unwrap(), Staleness::Current);
    assert_eq!(run.started.child.exit_status(), None);
    // A pid nobody uses.
    assert_eq!(identity::measure(u32::MAX - 1).unwrap(), None);
}

#[test]
fn comm_with_spaces_and_parens_parses() {
    let dir = tempfile::tempdir().unwrap();
    let odd = dir.path().join("a (b) c");
    std::fs::copy(testkit(), &odd).unwrap();
    let run = Running::start(&spec(dir.path(), "odd", "./a (b) c", &[]));
    let id = &run.started.identity;
    assert_eq!(id.exe, odd.canonicalize().unwrap());
    assert!(id.start_time_ticks > 0);
    assert_eq!(
        identity::matches(id, identity::measure(id.pid).unwrap().as_ref()),
        IdentityMatch::Same
    );
}

#[test]
fn a_child_that_exits_at_once_reports_its_status() {
    let dir = tempfile::tempdir().unwrap();
    match process::start(&spec(dir.path(), "quick", "sh", &["-c", "exit 7"])) {
        Err(ExecError::ExitedAtStart { status, pid, .. }) => {
            assert_eq!(status, "exit status 7", "pid {pid}")
        }
        Ok(started) => {
            let status = started
                .child
                .wait_timeout(Duration::from_secs(10))
                .expect("exits");
            assert_eq!(status.code(), Some(7));
            assert_eq!(
                started.child.exit_description().unwrap(),
                format!("pid {} exit status 7", started.identity.pid)
            );
        }
        Err(e) => panic!("unexpected: {e}"),
    }
}

#[test]
fn stop_sends_sigterm_to_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let run = start_testkit(dir.path(), "kit", &[]);
    wait_for_line(&run.log, "STARTED");
    let out = process::stop(&run.started.identity, "SIGTERM", Duration::from_secs(5)).unwrap();
    match out {
        StopOutcome::Stopped {
            signal,
            escalated_to_kill,
            took,
        } => {
            assert_eq!(signal, "SIGTERM");
            assert!(!escalated_to_kill);
            assert!(took < Duration::from_secs(5));
        }
        other => panic!("{other:?}"),
    }
    assert!(process::group_members(run.started.identity.pgid)
        .unwrap()
        .is_empty());
    let status = run
        .started
        .child
        .wait_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(status.code(), Some(0), "testkit exits 0 on SIGTERM");
    wait_for_line(&run.log, "SIGTERM");
    // Idempotent: stopping again finds it gone.
    assert_eq!(
        process::stop(&run.started.identity, "TERM", Duration::from_secs(1)).unwrap(),
        StopOutcome::AlreadyGone { survivors: vec![] }
    );
}

#[test]
fn sigterm_ignoring_service_and_its_child_are_sigkilled_after_grace() {
    let dir = tempfile::tempdir().unwrap();
    let run = start_testkit(
        dir.path(),
        "stubborn",
        &[
            "--ignore-sigterm",
            "--spawn-child",
            "--child-ignores-sigterm",
        ],
    );
    let child_line = wait_for_line(&run.log, "CHILD ");
    let child: u32 = child_line["CHILD ".len()..].trim().parse().unwrap();
    assert!(alive(child));
    assert_eq!(
        process::group_members(run.started.identity.pgid).unwrap(),
        {
            let mut v = vec![run.pid(), child];
            v.sort();
            v
        }
    );
    let grace = Duration::from_millis(300);
    let out = process::stop(&run.started.identity, "SIGTERM", grace).unwrap();
    match out {
        StopOutcome::Stopped {
            escalated_to_kill,
            took,
            ..
        } => {
            assert!(escalated_to_kill);
            assert!(took >= grace, "{took:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!alive(child), "child {child} survived");
    assert!(!alive(run.pid()));
    let status = run
        .started
        .child
        .wait_timeout(Duration::from_secs(5))
        .unwrap();
    assert_eq!(process::describe_exit(&status), "killed by SIGKILL");
    assert!(std::fs::read_to_string(&run.log)
        .unwrap()
        .contains("IGNORED SIGTERM"));
}

#[test]
fn a_reused_pid_is_not_signalled() {
    let dir = tempfile::tempdir().unwrap();
    let run = start_testkit(dir.path(), "kit", &[]);
    wait_for_line(&run.log, "STARTED");
    let mut forged = run.started.identity.clone();
    forged.start_time_ticks -= 1;
    match process::stop(&forged, "SIGKILL", Duration::from_secs(1)).unwrap() {
        StopOutcome::IdentityMismatch { measured, why } => {
            assert_eq!(measured, run.started.identity);
            assert!(why.contains("start time"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // Still alive and untouched.
    assert!(alive(run.pid()));
    assert_eq!(run.started.child.exit_status(), None);
    assert!(!std::fs::read_to_string(&run.log)
        .unwrap()
        .contains("SIGTERM"));
    let out = process::stop(&run.started.identity, "SIGTERM", Duration::from_secs(5)).unwrap();
    assert!(matches!(out, StopOutcome::Stopped { .. }), "{out:?}");
}

#[test]
fn stop_identified_signals_the_pid_alone_and_only_while_it_is_the_same_process() {
    let dir = tempfile::tempdir().unwrap();
    let run = start_testkit(dir.path(), "kit", &["--spawn-child"]);
    let child_line = wait_for_line(&run.log, "CHILD ");
    let child: u32 = child_line["CHILD ".len()..].trim().parse().unwrap();
    let ticks = run.started.identity.start_time_ticks;
    // Another start time: nothing is signalled.
    match process::stop_identified(run.pid(), ticks - 1, Duration::from_secs(1)).unwrap() {
        StopOutcome::IdentityMismatch { measured, why } => {
            assert_eq!(measured.pid, run.pid());
            assert!(why.contains("start time"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert!(alive(run.pid()));
    let out = process::stop_identified(run.pid(), ticks, Duration::from_secs(5)).unwrap();
    assert!(
        matches!(
            out,
            StopOutcome::Stopped {
                escalated_to_kill: false,
                ..
            }
        ),
        "{out:?}"
    );
    assert!(!alive(run.pid()));
    // The pid alone, not its process group.
    assert!(alive(child), "the group's other member was signalled");
    assert_eq!(
        process::stop_identified(run.pid(), ticks, Duration::from_secs(1)).unwrap(),
        StopOutcome::AlreadyGone { survivors: vec![] }
    );
    let mut rest = run.started.identity.clone();
    rest.pid = child;
    rest.start_time_ticks = flotilla_exec::process_start_ticks(child).unwrap();
    rest.pgid = 0;
    let out = process::stop(&rest, "SIGKILL", Duration::from_secs(1)).unwrap();
    assert!(matches!(out, StopOutcome::Stopped { .. }), "{out:?}");
}

#[test]
fn listeners_name_the_pid_and_command() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let run = start_testkit(dir.path(), "kit", &["--listen", &listen]);
    wait_for_line(&run.log, "LISTENING");
    let found = process::listeners(port).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].pid, Some(run.pid()));
    assert_eq!(found[0].command.as_deref(), Some("flotilla-testkit"));
    assert_eq!(found[0].address.to_string(), listen);
    // Our own listener shows up too, under this test's pid.
    let mine = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let my_port = mine.local_addr().unwrap().port();
    let found = process::listeners(my_port).unwrap();
    assert!(
        found.iter().any(|l| l.pid == Some(std::process::id())),
        "{found:?}"
    );
    drop(mine);
    assert!(process::listeners(free_port()).unwrap().is_empty());
}

#[test]
fn start_rotates_an_oversized_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = spec(
        dir.path(),
        "big",
        "sh",
        &["-c", "echo fresh; exec sleep 30"],
    );
    s.log_max_bytes = 100;
    s.log_keep = 2;
    std::fs::create_dir_all(dir.path().join("logs")).unwrap();
    std::fs::write(&s.log_path, "x".repeat(500)).unwrap();
    let run = Running::start(&s);
    assert_eq!(run.started.log_start_offset, 0);
    wait_for_line(&run.log, "fresh");
    let rotated = flotilla_exec::logs::rotated_path(&s.log_path, 1);
    assert_eq!(std::fs::read_to_string(rotated).unwrap().len(), 500);
    assert_eq!(
        flotilla_exec::tail_log(&s.log_path, 2).unwrap(),
        vec!["x".repeat(500), "fresh".to_string()]
    );
}

#[test]
fn a_binary_replaced_on_disk_is_a_stale_runtime_not_a_different_process() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("svc");
    std::fs::copy(testkit(), &bin).unwrap();
    let run = Running::start(&spec(dir.path(), "svc", "./svc", &[]));
    wait_for_line(&run.log, "STARTED");
    // Replace the file the way an upgrade does: write a new one, rename it over.
    let new = dir.path().join("svc.new");
    std::fs::write(&new, b"#!/bin/sh\necho v2\n").unwrap();
    std::fs::set_permissions(&new, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&new, &bin).unwrap();
    let measured = identity::measure(run.pid()).unwrap().unwrap();
    assert!(measured.exe_replaced(), "{}", measured.exe.display());
    assert_eq!(measured.exe_sha256, run.started.identity.exe_sha256);
    match identity::staleness(&measured).unwrap() {
        Staleness::Replaced {
            on_disk, running, ..
        } => {
            assert_eq!(on_disk, identity::exe_on_disk_sha256(&bin).unwrap());
            assert_ne!(on_disk.as_deref(), Some(running.as_str()));
        }
        Staleness::Current => panic!("not detected"),
    }
    assert_eq!(
        identity::matches(&run.started.identity, Some(&measured)),
        IdentityMatch::Same
    );
    let out = process::stop(&run.started.identity, "SIGTERM", Duration::from_secs(5)).unwrap();
    assert!(matches!(out, StopOutcome::Stopped { .. }), "{out:?}");
}
