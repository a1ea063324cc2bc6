//! Agent sessions through a real authority: sessions are rows until their first
//! message, one runtime at most (bubblewrap, as the session's own uid), liveness reconciled
//! against the process, modes that cannot be switched, the gate's two front doors
//! failing closed, Alertmanager's webhook, the executor and capped output.
//!
//! The runtime program here is a stand-in for Claude Code (a shell script that
//! records its arguments and credential and waits), so that the runtime's
//! machinery is tested on its own; `tests/claude_code.rs` runs the real one.

mod common;

use common::sessions::SessionsAuthority;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// The stand-in agent: records its arguments, its prompt (stdin) and its credential
/// in its home, then waits (as a turn that takes long would).
const FAKE_AGENT: &str = r#"#!/bin/sh
printf '%s\n' "$@" >> "$HOME/args"
cat >> "$HOME/args"
echo >> "$HOME/args"
# A conversation named by --session-id leaves a transcript, as Claude Code's does.
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

fn fake_agent(dir: &std::path::Path) -> PathBuf {
    let p = dir.join("fake-agent");
    std::fs::write(&p, FAKE_AGENT).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// An authority whose runtime is the stand-in agent.
fn authority(extra: &str) -> (SessionsAuthority, tempfile::TempDir) {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = fake_agent(bin.path());
    (SessionsAuthority::new(&agent, &[], "", extra), bin)
}

fn alive(pid: u64) -> bool {
    flotilla_exec::process_start_ticks(pid as u32).is_some()
}

/// A directory the executor's user (an unprivileged uid of its own) may write.
fn executor_writable(s: &SessionsAuthority) -> PathBuf {
    let d = s.a.ws.path().join("executor-out");
    std::fs::create_dir_all(&d).unwrap();
    let uid: u32 = flotilla_server::privsep::DEFAULT_EXECUTOR_USER
        .parse()
        .unwrap();
    nix::unistd::chown(
        &d,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(uid)),
    )
    .unwrap();
    d
}

/// The session's own credential, as its runtime received it.
fn token(s: &SessionsAuthority, id: u64) -> String {
    let home = s.a.ws.path().join(format!("sessions/{id}/home/token"));
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || home.exists()),
        "the runtime never started: {:#}",
        s.show(id)
    );
    std::fs::read_to_string(home).unwrap().trim().to_string()
}

/// A client of the authority with `credential`.
fn client(s: &SessionsAuthority, credential: &str) -> flotilla_api::Client {
    let op: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.a.dir.join("operator.json")).unwrap()).unwrap();
    flotilla_api::Client::new(
        &s.a.url,
        op["ca_pem"].as_str().unwrap(),
        Some(credential.to_string()),
    )
    .unwrap()
}

fn post(c: &flotilla_api::Client, path: &str, body: &serde_json::Value) -> serde_json::Value {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let bytes = rt
        .block_on(c.post_bytes(path, body.to_string().into_bytes(), Duration::from_secs(30)))
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    serde_json::from_slice(&bytes).unwrap()
}

#[test]
fn a_session_is_a_row_until_its_first_message_and_a_killed_runtime_is_never_shown_working() {
    let (s, _bin) = authority("");
    let id = s.create(&[]);
    let shown = s.show(id);
    assert_eq!(shown["state"], "new", "{shown:#}");
    assert_eq!(shown["runtime_alive"], false);
    assert!(shown["doc"]["tree"].is_null(), "creating makes no tree");
    assert!(!s.a.ws.path().join(format!("sessions/{id}")).exists());

    let r = s.run(&["session", "send", &id.to_string(), "look at the disk alert"]);
    assert_eq!(r.code, 0, "{r:?}");
    let shown = s.wait_state(id, "working", Duration::from_secs(30));
    let pid = shown["doc"]["runtime"]["pid"].as_u64().unwrap();
    assert!(alive(pid));
    // The runtime runs as the session's own uid (from [runtime] uids, never a
    // shared account), inside bubblewrap, in the session's tree.
    let uid = shown["doc"]["uid"].as_u64().unwrap();
    assert!((61184..=65519).contains(&uid), "{shown:#}");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some(&uid.to_string())),
        "{status}"
    );
    let tree = shown["doc"]["tree"].as_str().unwrap().to_string();
    assert!(PathBuf::from(&tree).join("README.md").exists());
    let _ = token(&s, id);
    let args =
        std::fs::read_to_string(s.a.ws.path().join(format!("sessions/{id}/home/args"))).unwrap();
    assert!(args.contains("look at the disk alert"), "{args}");
    assert!(args.contains("--session-id"), "{args}");

    // Killed: within one reconcile (1 s here) it is not shown working, ever again.
    common::kill9(pid as u32);
    let shown = s.wait_state(id, "failed", Duration::from_secs(5));
    assert_eq!(shown["runtime_alive"], false, "{shown:#}");
    assert!(shown["doc"]["runtime"].is_null());

    // The next message boots a new runtime that resumes the conversation.
    let r = s.run(&["session", "send", &id.to_string(), "and now?"]);
    assert_eq!(r.code, 0, "{r:?}");
    let shown = s.wait_state(id, "working", Duration::from_secs(30));
    assert_eq!(shown["doc"]["runtime"]["boot"], 2);
    assert_ne!(shown["doc"]["runtime"]["pid"].as_u64().unwrap(), pid);
    let args = s.a.ws.path().join(format!("sessions/{id}/home/args"));
    let resumed = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&args)
            .is_ok_and(|a| a.contains("--resume") && a.contains("and now?"))
    });
    assert!(resumed, "{:?}", std::fs::read_to_string(&args));
}

#[test]
fn twenty_concurrent_messages_boot_one_runtime() {
    let (s, _bin) = authority("");
    let id = s.create(&[]);
    let runs = s.run_concurrently(20, |i| {
        ["session", "send", &id.to_string(), &format!("message {i}")]
            .map(String::from)
            .to_vec()
    });
    for r in runs {
        assert_eq!(r.code, 0, "{r:?}");
    }
    let shown = s.wait_state(id, "working", Duration::from_secs(30));
    assert_eq!(s.events_of(id, "runtime-booted").len(), 1);
    assert_eq!(s.events_of(id, "message").len(), 20);
    // The first message booted it; the other 19 wait for the next turn.
    assert_eq!(shown["doc"]["pending"].as_array().unwrap().len(), 19);
    let pid = shown["doc"]["runtime"]["pid"].as_u64().unwrap();

    // When the turn ends, one runtime takes all 19.
    common::kill9(pid as u32);
    let ok = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        let v = s.show(id);
        v["state"] == "working" && v["doc"]["runtime"]["boot"] == 2
    });
    assert!(ok, "{:#}", s.show(id));
    let booted = s.events_of(id, "runtime-booted");
    assert_eq!(booted.len(), 2);
    assert_eq!(booted[1]["messages"], 19);
    assert!(s.show(id)["doc"]["pending"].as_array().unwrap().is_empty());
}

#[test]
fn a_mode_switch_is_refused_and_shown_refused() {
    let (s, _bin) = authority("");
    let id = s.create(&["--mode", "bypassPermissions"]);
    let r = s.run(&["session", "mode", &id.to_string(), "default"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("refused"), "{}", r.stderr);
    let refused = s.events_of(id, "mode-switch-refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["requested"], "default");
    assert_eq!(s.show(id)["doc"]["mode"], "bypassPermissions");
    let bad = s.run(&["session", "create", "--repo", "infra", "--mode", "yolo"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    let bad = s.run(&["session", "create", "--repo", "nope"]);
    assert_ne!(bad.code, 0);
    assert!(
        bad.stderr.contains("no repository `nope`"),
        "{}",
        bad.stderr
    );
}

/// Claude Code's `PreToolUse` hook input for a `Bash` call of `command`.
fn bash_hook(command: &str) -> serde_json::Value {
    serde_json::json!({
        "session_id": "00000000-0000-4000-8000-000000000000",
        "transcript_path": "/dev/null",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "d"},
        "tool_use_id": "toolu_01"
    })
}

#[test]
fn the_http_hook_asks_once_per_exact_call_and_fails_closed() {
    let (s, _bin) = authority("");
    let id = s.create(&["--prompt", "push it"]);
    let tok = token(&s, id);
    let session = client(&s, &tok);
    let payload = bash_hook;
    let decision = |v: &serde_json::Value| {
        v["hookSpecificOutput"]["permissionDecision"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    // An always-ask command: deferred, and a question opened (once, however often
    // the same call comes back unanswered).
    let a = post(&session, "/v1/gate/hook", &payload("git push origin main"));
    assert_eq!(decision(&a), "defer", "{a:#}");
    let again = post(&session, "/v1/gate/hook", &payload("git push origin main"));
    assert_eq!(decision(&again), "defer");
    let q = s.run(&["questions", "--json"]).json();
    let qs = q["questions"].as_array().unwrap();
    assert_eq!(qs.len(), 1, "{q:#}");
    let qid = qs[0]["id"].as_u64().unwrap();
    assert_eq!(
        qs[0]["doc"]["tool_input"]["command"],
        "git push origin main"
    );

    // Answered allow: that exact call goes ahead, once; another input still asks.
    let r = s.run(&[
        "question",
        "answer",
        &qid.to_string(),
        "allow",
        "--note",
        "ok",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    let other = post(
        &session,
        "/v1/gate/hook",
        &payload("git push origin main --force"),
    );
    assert_eq!(decision(&other), "defer");
    let yes = post(&session, "/v1/gate/hook", &payload("git push origin main"));
    assert_eq!(decision(&yes), "allow", "{yes:#}");
    let once = post(&session, "/v1/gate/hook", &payload("git push origin main"));
    assert_eq!(decision(&once), "defer", "an answer applies once");
    let twice = s.run(&["question", "answer", &qid.to_string(), "deny"]);
    assert_eq!(twice.code, 1, "{twice:?}");

    // Fails closed: an operator's credential is not a session's; a bad body.
    let op: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.a.dir.join("operator.json")).unwrap()).unwrap();
    let operator = client(&s, op["credential"].as_str().unwrap());
    let no = post(&operator, "/v1/gate/hook", &payload("ls"));
    assert_eq!(decision(&no), "deny", "{no:#}");
    let nobody = client(&s, "flt-session-0000");
    let no = post(&nobody, "/v1/gate/hook", &payload("ls"));
    assert_eq!(decision(&no), "deny", "{no:#}");
    let bad = post(
        &session,
        "/v1/gate/hook",
        &serde_json::json!({"tool_name": 3}),
    );
    assert_eq!(decision(&bad), "deny", "{bad:#}");

    // "Inside the tree" is the session's real tree, not the payload's cwd.
    let mut read = payload("x");
    read["tool_name"] = "Read".into();
    read["tool_input"] = serde_json::json!({"file_path": "/etc/passwd"});
    read["cwd"] = "/".into();
    let r = post(&session, "/v1/gate/hook", &read);
    assert_ne!(decision(&r), "allow", "{r:#}");

    // The command hook: the same answer on stdout, exit 0; unreachable: exit 2.
    let ca = s.a.ws.path().join("ca.pem");
    std::fs::write(&ca, op["ca_pem"].as_str().unwrap()).unwrap();
    let hook = |server: &str| {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["gate", "hook", "--timeout", "5s"])
            .env("FLOTILLA_SERVER", server)
            .env("FLOTILLA_CA", &ca)
            .env("FLOTILLA_SESSION_TOKEN", &tok)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(payload("rm -rf build").to_string().as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = hook(&s.a.url);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision(&v), "defer", "{v:#}");
    let port = common::authority::free_port();
    let out = hook(&format!("https://127.0.0.1:{port}"));
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed closed"));

    // A credential dies with its runtime: a copy of it is worth nothing after.
    let r = s.run(&["session", "stop", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    let stale = post(&session, "/v1/gate/hook", &payload("ls"));
    assert_eq!(decision(&stale), "deny", "{stale:#}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(
            session.post_bytes(
                "/v1/exec",
                serde_json::json!({"argv": ["seq", "1"]})
                    .to_string()
                    .into_bytes(),
                Duration::from_secs(10),
            ),
        )
        .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

#[test]
fn the_executor_runs_reads_asks_for_the_rest_and_caps_output() {
    let (s, _bin) = authority(
        r#"[executor]
allow = [["journalctl"], ["seq"]]
"#,
    );
    let id = s.create(&["--prompt", "investigate"]);
    let session = client(&s, &token(&s, id));
    // A read: runs at once.
    let r = post(
        &session,
        "/v1/exec",
        &serde_json::json!({"argv": ["seq", "3"]}),
    );
    assert_eq!(r["outcome"], "ran", "{r:#}");
    assert_eq!(r["stdout"], "1\n2\n3\n");
    // Long output: capped, the whole kept and retrievable.
    let r = post(
        &session,
        "/v1/exec",
        &serde_json::json!({"argv": ["seq", "100000"]}),
    );
    assert_eq!(r["outcome"], "ran");
    let shown = r["stdout"].as_str().unwrap();
    assert!(shown.len() < 20 * 1024, "{}", shown.len());
    assert!(shown.starts_with("1\n2\n"));
    assert!(shown.ends_with("99999\n100000\n"));
    let oid = r["outputs"][0].as_str().unwrap();
    assert!(shown.contains(&format!("flotilla output {oid}")), "{shown}");
    let whole = s.run(&["output", oid]);
    assert_eq!(whole.code, 0);
    let expected: String = (1..=100000).map(|i| format!("{i}\n")).collect();
    assert_eq!(whole.stdout, expected);
    // Another session cannot read it.
    let other = s.create(&["--prompt", "other"]);
    let other = client(&s, &token(&s, other));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(other.get_text(&format!("/v1/outputs/{oid}")))
        .unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");
    let own = rt
        .block_on(session.get_text(&format!("/v1/outputs/{oid}")))
        .unwrap();
    assert_eq!(own, expected);
    // Nor through the blob store, nor by naming the id in an executor call.
    let err = rt
        .block_on(other.get_text(&format!("/v1/blobs/{oid}")))
        .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
    let _ = rt.block_on(other.post_bytes(
        "/v1/exec",
        serde_json::json!({"argv": [oid]}).to_string().into_bytes(),
        Duration::from_secs(10),
    ));
    let err = rt
        .block_on(other.get_text(&format!("/v1/outputs/{oid}")))
        .unwrap_err();
    assert!(err.to_string().contains("404"), "{err}");

    // Anything else: a question for that exact argv; runs once answered allow.
    let marker = executor_writable(&s).join("executed");
    let argv = serde_json::json!({"argv": ["touch", marker.to_str().unwrap()]});
    let r = post(&session, "/v1/exec", &argv);
    assert_eq!(r["outcome"], "asked", "{r:#}");
    assert!(!marker.exists());
    let qid = r["question"].as_u64().unwrap();
    // Answered once, however many answer at once.
    let results: Vec<(i32, &str)> = s
        .run_concurrently(8, |_| {
            ["question", "answer", &qid.to_string(), "allow"]
                .map(String::from)
                .to_vec()
        })
        .into_iter()
        .map(|r| (r.code, "allow"))
        .collect();
    let won: Vec<_> = results.iter().filter(|(c, _)| *c == 0).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    assert!(results
        .iter()
        .filter(|(c, _)| *c != 0)
        .all(|(c, _)| *c == 1));
    let r = post(&session, "/v1/exec", &argv);
    assert_eq!(r["outcome"], "ran", "{r:#}");
    assert!(marker.exists());
    let r = post(&session, "/v1/exec", &argv);
    assert_eq!(r["outcome"], "asked", "an answer applies once");
    let journaled = s.events_of(id, "exec");
    assert_eq!(journaled.len(), 5, "{journaled:#?}");

    // The runtime's side: `flotilla exec -- ARGV` with the session's environment.
    let op: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.a.dir.join("operator.json")).unwrap()).unwrap();
    let ca = s.a.ws.path().join("ca.pem");
    std::fs::write(&ca, op["ca_pem"].as_str().unwrap()).unwrap();
    let exec = |argv: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .arg("exec")
            .arg("--")
            .args(argv)
            .env("FLOTILLA_SERVER", &s.a.url)
            .env("FLOTILLA_CA", &ca)
            .env("FLOTILLA_SESSION_TOKEN", token(&s, id))
            .output()
            .unwrap()
    };
    let out = exec(&["seq", "2"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "1\n2\n");
    let out = exec(&["journalctl", "--vacuum-size=1M"]);
    // Not run: a question waits (126, never a program's own status).
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("question"),
        "{out:?}"
    );
}

#[test]
fn an_idle_runtime_is_torn_down_and_a_failed_one_says_why() {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = fake_agent(bin.path());
    let s = SessionsAuthority::new(&agent, &[], "idle_timeout = \"2s\"", "");
    let id = s.create(&["--prompt", "hello"]);
    let shown = s.wait_state(id, "idle", Duration::from_secs(30));
    assert_eq!(shown["doc"]["last_end"]["how"], "idle", "{shown:#}");
    let pid = s.events_of(id, "runtime-booted")[0]["pid"]
        .as_u64()
        .unwrap();
    // Killed by the launcher (SIGKILL), reaped by it a moment later.
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(10), || !alive(pid)),
        "the torn-down runtime {pid} still runs"
    );
    let torn = s.events_of(id, "runtime-torn-down");
    assert_eq!(torn.len(), 1, "{torn:#?}");
    assert_eq!(torn[0]["why"], "idle");

    // A runtime program that fails: its stderr is in the event.
    let failing = bin.path().join("failing-agent");
    std::fs::write(
        &failing,
        "#!/bin/sh\necho 'no model configured' >&2\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&failing, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = SessionsAuthority::new(&failing, &[], "", "");
    let id = f.create(&["--prompt", "hello"]);
    let mut shown = f.wait_state(id, "failed", Duration::from_secs(30));
    // A read may find it gone before the task that reaped it records its exit
    // code; that record follows.
    let coded = flotilla_testkit::wait_until(Duration::from_secs(10), || {
        shown = f.show(id);
        shown["doc"]["last_end"]["code"] == 3
    });
    assert!(coded, "{shown:#}");
    let exited = f.events_of(id, "runtime-exited");
    assert_eq!(exited[0]["code"], 3);
    assert!(
        exited[0]["stderr"]
            .as_str()
            .unwrap()
            .contains("no model configured"),
        "{exited:#?}"
    );
}

#[test]
fn an_alertmanager_payload_posted_five_times_makes_one_session() {
    let (s, _bin) = authority(
        r#"[alerts]
repo = "infra"
"#,
    );
    let r = s.run(&["serve", "alerts-credential"]);
    assert_eq!(r.code, 0, "{r:?}");
    let cred = r
        .stdout
        .split_whitespace()
        .find(|w| w.starts_with("flt-alerts-"))
        .unwrap()
        .to_string();
    let am = client(&s, &cred);
    let alert = |name: &str, severity: &str, status: &str, fp: &str| {
        serde_json::json!({
            "status": status,
            "labels": {"alertname": name, "severity": severity, "instance": "gpu-1"},
            "annotations": {"summary": format!("{name} on gpu-1")},
            "startsAt": "2026-12-01T10:00:00Z",
            "endsAt": if status == "resolved" { "2026-12-01T11:00:00Z" } else { "0001-01-01T00:00:00Z" },
            "generatorURL": "http://prometheus.example.invalid/graph",
            "fingerprint": fp
        })
    };
    let payload = |status: &str, alerts: Vec<serde_json::Value>| {
        serde_json::json!({
            "version": "4",
            "groupKey": "{}:{alertname=\"DiskFull\"}",
            "truncatedAlerts": 0,
            "status": status,
            "receiver": "flotilla",
            "groupLabels": {"alertname": "DiskFull"},
            "commonLabels": {"severity": "critical"},
            "commonAnnotations": {},
            "externalURL": "http://alertmanager.example.invalid",
            "alerts": alerts
        })
    };
    let disk = alert("DiskFull", "critical", "firing", "a1b2c3");
    let first = post(
        &am,
        "/v1/alerts/alertmanager",
        &payload("firing", vec![disk.clone()]),
    );
    assert_eq!(first["opened"].as_array().unwrap().len(), 1, "{first:#}");
    let id = first["opened"][0].as_u64().unwrap();
    let repeat = post(
        &am,
        "/v1/alerts/alertmanager",
        &payload("firing", vec![disk.clone()]),
    );
    assert!(
        repeat["opened"].as_array().unwrap().is_empty(),
        "{repeat:#}"
    );
    let warn = alert("DiskSlow", "warning", "firing", "d4e5f6");
    let added = post(
        &am,
        "/v1/alerts/alertmanager",
        &payload("firing", vec![disk.clone(), warn.clone()]),
    );
    assert!(added["opened"].as_array().unwrap().is_empty(), "{added:#}");
    let again = post(
        &am,
        "/v1/alerts/alertmanager",
        &payload("firing", vec![disk.clone(), warn.clone()]),
    );
    assert!(again["opened"].as_array().unwrap().is_empty());
    let resolved = post(
        &am,
        "/v1/alerts/alertmanager",
        &payload(
            "resolved",
            vec![
                alert("DiskFull", "critical", "resolved", "a1b2c3"),
                alert("DiskSlow", "warning", "resolved", "d4e5f6"),
            ],
        ),
    );
    assert_eq!(resolved["updated"], serde_json::json!([id]), "{resolved:#}");

    let all = s.run(&["session", "list", "--json"]).json();
    assert_eq!(all["sessions"].as_array().unwrap().len(), 1, "{all:#}");
    let alerts = s.events_of(id, "alert");
    assert_eq!(alerts.len(), 2, "{alerts:#?}");
    assert_eq!(alerts[0]["status"], "firing");
    assert_eq!(alerts[1]["status"], "resolved");
    let messages = s.events_of(id, "message");
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let text = messages[0]["text"].as_str().unwrap();
    assert!(
        text.contains("DiskFull") && text.contains("gpu-1"),
        "{text}"
    );
    assert!(
        text.contains("http://prometheus.example.invalid/graph"),
        "{text}"
    );
    assert_eq!(s.show(id)["doc"]["created_by"], "alertmanager");

    // Only an alert sender (or an operator) may post; a session may not.
    let session = client(&s, &token(&s, id));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let err = rt
        .block_on(session.post_bytes(
            "/v1/alerts/alertmanager",
            payload("firing", vec![disk]).to_string().into_bytes(),
            Duration::from_secs(10),
        ))
        .unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

#[test]
fn the_sandbox_hides_the_authority_other_sessions_and_roots_home() {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let probe = bin.path().join("probe-agent");
    std::fs::write(
        &probe,
        r#"#!/bin/sh
{
  echo "uid $(id -u)"
  echo "authority:"; ls -A "$PROBE_AUTHORITY"
  echo "sessions:"; ls -A "$PROBE_SESSIONS"
  echo "root:"; ls -A /root
  echo "writes:"
  touch "$(dirname "$PROBE_SESSIONS")/planted" 2>/dev/null && echo "wrote outside"
  touch "$PWD/inside" && echo "wrote inside"
} > "$HOME/probe.tmp" 2>&1
mv "$HOME/probe.tmp" "$HOME/probe"
exec sleep 600
"#,
    )
    .unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The paths the probe looks at are only known once the workspace exists: the
    // authority's directory and the sessions directory are under it.
    let s = SessionsAuthority::new(&probe, &[], "", "");
    let ws = s.a.ws.path().to_path_buf();
    // Restart with the probe's environment pointing at them.
    let toml_path = s.a.dir.join("sessions.toml");
    let toml = std::fs::read_to_string(&toml_path).unwrap().replace(
        "env = { ",
        &format!(
            "env = {{ PROBE_AUTHORITY = {:?}, PROBE_SESSIONS = {:?}, ",
            s.a.dir.display().to_string(),
            ws.join("sessions").display().to_string()
        ),
    );
    std::fs::write(&toml_path, toml).unwrap();
    let mut s = s;
    s.a.kill9();
    s.a.start();
    let first = s.create(&["--prompt", "one"]);
    let second = s.create(&["--prompt", "two"]);
    let out = ws.join(format!("sessions/{second}/home/probe"));
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || out.exists()),
        "{:#}",
        s.show(second)
    );
    let seen = std::fs::read_to_string(&out).unwrap();
    let section = |name: &str| -> Vec<String> {
        seen.split(&format!("{name}:\n"))
            .nth(1)
            .unwrap_or_default()
            .lines()
            .take_while(|l| !l.ends_with(':'))
            .map(str::to_owned)
            .collect()
    };
    let uid = s.show(second)["doc"]["uid"].as_u64().unwrap();
    assert!(seen.starts_with(&format!("uid {uid}\n")), "{seen}");
    assert_ne!(
        uid,
        s.show(first)["doc"]["uid"].as_u64().unwrap(),
        "a uid each"
    );
    assert!(section("authority").is_empty(), "{seen}");
    assert!(section("root").is_empty(), "{seen}");
    let sessions = section("sessions");
    assert!(sessions.contains(&second.to_string()), "{seen}");
    assert!(!sessions.contains(&first.to_string()), "{seen}");
    // Whatever the sandbox wrote outside its tree and home went to its own private
    // tmpfs (/tmp is one there): nothing reached the real file system.
    assert!(seen.contains("wrote inside"), "{seen}");
    assert!(!ws.join("planted").exists());
}

#[test]
fn at_most_max_runtimes_run_and_the_rest_wait_for_capacity() {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = fake_agent(bin.path());
    let s = SessionsAuthority::new(&agent, &[], "max_runtimes = 1", "");
    // Created at once, they still never run more than one runtime.
    let racers = s.run_concurrently(4, |i| {
        [
            "session",
            "create",
            "--repo",
            "infra",
            "--prompt",
            &format!("racer {i}"),
        ]
        .map(String::from)
        .to_vec()
    });
    for r in racers {
        assert_eq!(r.code, 0, "{r:?}");
    }
    let all = s.run(&["session", "list", "--json"]).json();
    let running: Vec<_> = all["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["runtime_alive"] == true)
        .collect();
    assert_eq!(running.len(), 1, "{all:#}");
    for x in all["sessions"].as_array().unwrap() {
        if let Some(pid) = x["doc"]["runtime"]["pid"].as_u64() {
            common::kill9(pid as u32);
        }
    }
    // Each waiting one boots in turn as the one before ends; end them all.
    let ok = flotilla_testkit::wait_until(Duration::from_secs(60), || {
        let all = s.run(&["session", "list", "--json"]).json();
        let list = all["sessions"].as_array().unwrap().clone();
        for x in &list {
            if let Some(pid) = x["doc"]["runtime"]["pid"].as_u64() {
                common::kill9(pid as u32);
            }
        }
        list.iter()
            .all(|x| x["doc"]["boots"] == 1 && x["runtime_alive"] == false)
    });
    assert!(ok, "{:#}", s.run(&["session", "list", "--json"]).json());
    let a = s.create(&["--prompt", "first"]);
    s.wait_state(a, "working", Duration::from_secs(30));
    let b = s.create(&["--prompt", "second"]);
    let shown = s.show(b);
    assert_eq!(shown["state"], "new", "{shown:#}");
    assert_eq!(shown["doc"]["waiting_for_capacity"], true);
    assert_eq!(shown["doc"]["pending"], serde_json::json!(["second"]));
    // When the first runtime ends, the waiting session boots with its message.
    let pid = s.show(a)["doc"]["runtime"]["pid"].as_u64().unwrap();
    common::kill9(pid as u32);
    let shown = s.wait_state(b, "working", Duration::from_secs(30));
    assert_eq!(shown["doc"]["waiting_for_capacity"], false);
    let args = s.a.ws.path().join(format!("sessions/{b}/home/args"));
    let got = flotilla_testkit::wait_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&args).is_ok_and(|a| a.contains("second"))
    });
    assert!(got, "{:?}", std::fs::read_to_string(&args));
}

#[test]
fn a_bad_sessions_toml_is_refused_at_start_with_where() {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = fake_agent(bin.path());
    let cases: [(&str, &str, &str); 7] = [
        ("user", "user = \"nobody\"", "no longer share a user"),
        ("root uids", "uids = \"0-100\"", "start above 0"),
        ("nobody's uid", "uids = \"65000-65535\"", "65534"),
        ("not a range", "uids = \"lots\"", "not a range"),
        (
            "rule",
            "[gate]\nallow = [\"Bash(git push\"]",
            "[gate] allow",
        ),
        (
            "duration",
            "reconcile_every = \"ten minutes\"",
            "is not a duration",
        ),
        ("zero", "reconcile_every = \"0s\"", "at least 100ms"),
    ];
    for (name, line, expected) in cases {
        let ws = common::Workspace::new();
        let dir = ws.path().join("authority");
        let init = common::run_with_env(
            ws.path(),
            &["serve", "init"],
            &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
        );
        assert_eq!(init.code, 0, "{init:?}");
        // Top-level keys first, then the tables.
        let in_runtime = line.starts_with("user") || line.starts_with("uids");
        let (top, table) = if line.starts_with('[') || in_runtime {
            ("", line)
        } else {
            (line, "")
        };
        let text = format!(
            "{top}\n[runtime]\nclaude = {:?}\n{}\n[repos.infra]\nurl = \"https://example.invalid/x.git\"\n",
            agent.display().to_string(),
            if in_runtime { table } else { "" },
        ) + if table.starts_with('[') { table } else { "" };
        std::fs::write(dir.join("sessions.toml"), &text).unwrap();
        let port = common::authority::free_port();
        let r = common::run_with_env(
            ws.path(),
            &["serve", "--listen", &format!("127.0.0.1:{port}")],
            &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
        );
        assert_ne!(r.code, 0, "{name}: {r:?}");
        assert!(r.stderr.contains("sessions.toml"), "{name}: {}", r.stderr);
        assert!(r.stderr.contains(expected), "{name}: {}", r.stderr);
        // line:column of the offending value.
        let located = r
            .stderr
            .split("sessions.toml: ")
            .nth(1)
            .and_then(|rest| rest.split(": ").next())
            .is_some_and(|lc| {
                let mut it = lc.split(':');
                it.next().is_some_and(|l| l.parse::<u32>().is_ok())
                    && it.next().is_some_and(|c| c.parse::<u32>().is_ok())
            });
        assert!(located, "{name}: no line:column in {}", r.stderr);
    }
}

#[test]
fn a_busy_executor_uses_up_no_answer_and_questions_are_limited() {
    let (s, _bin) = authority(
        r#"[executor]
allow = [["sleep"], ["seq"]]
timeout = "10s"
max_running = 1
"#,
    );
    let id = s.create(&["--prompt", "investigate"]);
    let session = client(&s, &token(&s, id));
    let marker = executor_writable(&s).join("touched");
    let argv = serde_json::json!({"argv": ["touch", marker.to_str().unwrap()]});
    let asked = post(&session, "/v1/exec", &argv);
    let qid = asked["question"].as_u64().unwrap().to_string();
    assert_eq!(s.run(&["question", "answer", &qid, "allow"]).code, 0);

    // The one slot taken by a long read (ended by the executor's 10 s timeout).
    let busy = client(&s, &token(&s, id));
    let holder = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        loop {
            let r = rt.block_on(
                busy.post_bytes(
                    "/v1/exec",
                    serde_json::json!({"argv": ["sleep", "30"]})
                        .to_string()
                        .into_bytes(),
                    Duration::from_secs(30),
                ),
            );
            match r {
                // A probe below held the slot for a moment: again.
                Err(e) if e.to_string().contains("429") => continue,
                r => return serde_json::from_slice::<serde_json::Value>(&r.unwrap()).unwrap(),
            }
        }
    });
    let rt = tokio::runtime::Runtime::new().unwrap();
    let try_exec = |body: &serde_json::Value| {
        rt.block_on(session.post_bytes(
            "/v1/exec",
            body.to_string().into_bytes(),
            Duration::from_secs(30),
        ))
    };
    // Busy once a cheap read is refused for want of a slot.
    let saw_busy = flotilla_testkit::wait_until(Duration::from_secs(10), || {
        try_exec(&serde_json::json!({"argv": ["seq", "1"]}))
            .is_err_and(|e| e.to_string().contains("429"))
    });
    assert!(saw_busy, "the executor never reported busy");
    let refused = try_exec(&argv).unwrap_err();
    assert!(refused.to_string().contains("429"), "{refused}");
    assert!(!marker.exists());
    let held = holder.join().unwrap();
    assert_eq!(held["timed_out"], true, "{held:#}");
    // The answer was not used by the refusals: it runs now, once.
    let ran: serde_json::Value = serde_json::from_slice(&try_exec(&argv).unwrap()).unwrap();
    assert_eq!(ran["outcome"], "ran", "{ran:#}");
    assert!(marker.exists());
    assert!(s
        .events_of(id, "exec")
        .iter()
        .any(|e| e["outcome"] == "busy"));

    // At most 50 open questions: the 51st call that would ask is refused.
    for i in 0..50 {
        let r = post(
            &session,
            "/v1/exec",
            &serde_json::json!({"argv": ["true", format!("{i}")]}),
        );
        assert_eq!(r["outcome"], "asked", "{i}: {r:#}");
    }
    let err = try_exec(&serde_json::json!({"argv": ["true", "one too many"]})).unwrap_err();
    assert!(err.to_string().contains("403"), "{err}");
}

/// What a webhook receiver got: each request's path and body.
type Received = std::sync::Arc<std::sync::Mutex<Vec<(String, String)>>>;

/// A webhook receiver on 127.0.0.1 (plain HTTP/1.1): records each request's path
/// and body; a request to `/hang` is never answered.
fn webhook_receiver() -> (String, Received) {
    use std::io::{BufRead as _, Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let book = got.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let book = book.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(&stream);
                let mut line = String::new();
                r.read_line(&mut line).unwrap_or_default();
                let path = line.split(' ').nth(1).unwrap_or_default().to_string();
                let mut len = 0;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                    if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; len];
                r.read_exact(&mut body).unwrap_or_default();
                book.lock()
                    .unwrap()
                    .push((path.clone(), String::from_utf8_lossy(&body).into_owned()));
                if path == "/hang" {
                    loop {
                        std::thread::park();
                    }
                }
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            });
        }
    });
    (base, got)
}

#[test]
fn a_question_is_notified_with_its_link_and_a_hung_receiver_does_not_delay_the_gate() {
    let (mut s, _bin) = authority("");
    let (base, got) = webhook_receiver();
    std::fs::write(
        s.a.dir.join("notifications.toml"),
        format!("[[webhook]]\nurl = \"{base}/hang\"\nmax_attempts = 1\n\n[[webhook]]\nurl = \"{base}/ok\"\n"),
    )
    .unwrap();
    s.a.serve_args
        .extend(["--public-url".into(), "https://flotilla.test:7443".into()]);
    s.a.kill9();
    s.a.start();
    let id = s.create(&["--prompt", "push it"]);
    let session = client(&s, &token(&s, id));
    let ask = |command: &str| {
        let started = std::time::Instant::now();
        let v = post(&session, "/v1/gate/hook", &bash_hook(command));
        assert_eq!(
            v["hookSpecificOutput"]["permissionDecision"], "defer",
            "{v:#}"
        );
        started.elapsed()
    };
    let first = ask("git push origin main");
    let sent = |path: &str, n: usize| {
        flotilla_testkit::wait_until(Duration::from_secs(30), || {
            got.lock()
                .unwrap()
                .iter()
                .filter(|(p, _)| p == path)
                .count()
                >= n
        })
    };
    assert!(
        sent("/ok", 1) && sent("/hang", 1),
        "{:?}",
        got.lock().unwrap()
    );
    let q = s.run(&["questions", "--json"]).json();
    let qid = q["questions"][0]["id"].as_u64().unwrap();
    let body = got
        .lock()
        .unwrap()
        .iter()
        .find(|(p, _)| p == "/ok")
        .unwrap()
        .1
        .clone();
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["kind"], "question-opened", "{v:#}");
    assert_eq!(
        v["link"],
        format!("https://flotilla.test:7443/ui/questions/{qid}")
    );
    assert_eq!(v["dedup_key"], format!("question/{qid}"));
    assert!(
        v["text"].as_str().unwrap().contains("git push origin main"),
        "{v:#}"
    );
    // The hung receiver still holds the first delivery: the next question is
    // answered as fast, and sent too.
    let second = ask("git push origin dev");
    assert!(sent("/ok", 2), "{:?}", got.lock().unwrap());
    for t in [first, second] {
        assert!(t < Duration::from_secs(2), "the gate took {t:?}");
    }
    // The same call again reuses its open question: nothing new is sent.
    ask("git push origin dev");
    let list = s.run(&["serve", "notifications", "--json"]).json();
    let keys: Vec<&str> = list["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["dedup_key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2, "{list:#}");
    let text = s.run(&["serve", "notifications"]);
    assert!(
        text.stdout.contains(&format!(
            "question-opened       question {qid} waits: Bash in session {id}"
        )),
        "{text:?}"
    );
    assert_eq!(
        got.lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == "/ok")
            .count(),
        2
    );
}
