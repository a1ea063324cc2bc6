//! The session boundary, structurally: what a runtime cannot do whatever text it
//! runs, and what no tool call can do to the authority.
//!
//! - No remote is writable from a runtime: every adversarial shape
//!   (`crates/flotilla-sessions/tests/adversarial-shapes.txt`) is run by bash
//!   *inside a real sandbox*, bypassing the gate entirely, and judged by the
//!   remote's refs. Pushes go through the authority (`flotilla push`, or
//!   `flotilla exec -- git push`): a question showing the commits, then a push from
//!   outside the sandbox, exactly once, after an "allow".
//! - Pathological tool calls (deep nesting, huge payloads) are answered, and the
//!   authority keeps running; the gate's two front doors fail closed at every edge.
//! - A second unprivileged local user reads none of a session's files.
//! - One session cannot hold every executor slot.
//! - A runtime has no network of its own: the model API (its key injected
//!   outside), an allowlist of destinations and the authority, all relayed.

mod common;

use common::sessions::{git, SessionsAuthority};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The stand-in agent: hands its credential to the test (in its home), then waits.
const WAITING_AGENT: &str = r#"#!/bin/sh
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
exec sleep 600
"#;

fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// An authority whose runtime is `agent`, with `runtime` lines in `[runtime]` and
/// `extra` appended to `sessions.toml`.
fn authority_with(
    agent: &str,
    runtime: &str,
    extra: &str,
) -> (SessionsAuthority, tempfile::TempDir) {
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = script(bin.path(), "agent", agent);
    let env = [
        ("GIT_AUTHOR_NAME", "agent"),
        ("GIT_AUTHOR_EMAIL", "agent@example.invalid"),
        ("GIT_COMMITTER_NAME", "agent"),
        ("GIT_COMMITTER_EMAIL", "agent@example.invalid"),
    ];
    (SessionsAuthority::new(&agent, &env, runtime, extra), bin)
}

/// Session `id`'s credential, once its runtime has handed it over.
fn token(s: &SessionsAuthority, id: u64) -> String {
    let p = s.a.ws.path().join(format!("sessions/{id}/home/token"));
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || p.exists()),
        "the runtime never started: {:#}",
        s.show(id)
    );
    std::fs::read_to_string(p).unwrap().trim().to_string()
}

fn operator(s: &SessionsAuthority) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(s.a.dir.join("operator.json")).unwrap()).unwrap()
}

fn client(s: &SessionsAuthority, credential: &str) -> flotilla_api::Client {
    let op = operator(s);
    flotilla_api::Client::new(
        &s.a.url,
        op["ca_pem"].as_str().unwrap(),
        Some(credential.to_string()),
    )
    .unwrap()
}

fn post_raw(
    c: &flotilla_api::Client,
    path: &str,
    body: Vec<u8>,
) -> Result<Vec<u8>, flotilla_api::ClientError> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(c.post_bytes(path, body, Duration::from_secs(60)))
}

/// `flotilla ARGS` as session `id`'s runtime would run it (its environment),
/// from this process: the API is what is tested, not the sandbox.
fn as_runtime(s: &SessionsAuthority, tok: &str, args: &[&str]) -> common::Run {
    let ca = s.a.ws.path().join("runtime-ca.pem");
    std::fs::write(&ca, operator(s)["ca_pem"].as_str().unwrap()).unwrap();
    common::run_with_env(
        s.a.ws.path(),
        args,
        &[
            ("FLOTILLA_SERVER", s.a.url.as_str()),
            ("FLOTILLA_CA", ca.to_str().unwrap()),
            ("FLOTILLA_SESSION_TOKEN", tok),
        ],
    )
}

/// A Bash hook payload.
fn bash_payload(command: &str) -> serde_json::Value {
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

fn decision(answer: &[u8]) -> String {
    let v: serde_json::Value = serde_json::from_slice(answer)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(answer)));
    v["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every ref of the remote, with its commit.
fn refs(origin: &Path) -> String {
    git(
        origin,
        &["for-each-ref", "--format=%(objectname) %(refname)"],
    )
}

/// Session `id`'s own uid, as a string.
fn uid_of(s: &SessionsAuthority, id: u64) -> String {
    s.show(id)["doc"]["uid"]
        .as_u64()
        .expect("a uid")
        .to_string()
}

/// The tree of session `id`.
fn tree(s: &SessionsAuthority, id: u64) -> PathBuf {
    s.a.ws.path().join(format!("sessions/{id}/tree"))
}

/// Runs `argv` as `user` (a name, or a number: its uid and gid), with git's
/// identity; its output.
fn as_user(user: &str, dir: &Path, argv: &[&str]) -> std::process::Output {
    let (uid, gid) = match user.parse::<u32>() {
        Ok(n) => (n.to_string(), n.to_string()),
        Err(_) => {
            let u = nix::unistd::User::from_name(user).unwrap().unwrap();
            (u.uid.to_string(), u.gid.to_string())
        }
    };
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={gid}"),
            "--clear-groups",
            "--",
        ])
        .args(argv)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "agent")
        .env("GIT_AUTHOR_EMAIL", "agent@example.invalid")
        .env("GIT_COMMITTER_NAME", "agent")
        .env("GIT_COMMITTER_EMAIL", "agent@example.invalid")
        .env("HOME", "/nonexistent")
        .output()
        .unwrap()
}

#[test]
fn a_writable_remote_or_sessions_directory_is_refused_at_load_with_where() {
    let ws = common::Workspace::new();
    let bin = ws.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    common::sessions::open_up(&bin);
    let agent = script(&bin, "agent", WAITING_AGENT);
    let dir = ws.path().join("authority");
    let init = common::run_with_env(
        ws.path(),
        &["serve", "init"],
        &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
    );
    assert_eq!(init.code, 0, "{init:?}");
    let origin = ws.path().join("origin.git");
    std::fs::create_dir_all(&origin).unwrap();
    std::fs::create_dir_all(origin.join("refs")).unwrap();
    let link = ws.path().join("link-to-origin");
    std::os::unix::fs::symlink(&origin, &link).unwrap();
    let origin = origin.display().to_string();
    let sessions = ws.path().join("sessions");
    std::fs::create_dir_all(sessions.join("mirrors")).unwrap();
    for (writable, says) in [
        (link.display().to_string(), "remote of [repos.infra]"),
        (
            ws.path().join("nowhere").display().to_string(),
            "it must exist",
        ),
        (origin.clone(), "remote of [repos.infra]"),
        (format!("{origin}/refs"), "remote of [repos.infra]"),
        (ws.path().display().to_string(), "remote of [repos.infra]"),
        (
            sessions.join("mirrors").display().to_string(),
            "overlaps the sessions directory",
        ),
        ("relative/dir".to_string(), "is not absolute"),
    ] {
        let text = format!(
            "dir = {:?}\n[runtime]\nclaude = {:?}\nwritable = [{writable:?}]\n\n[repos.infra]\nurl = {origin:?}\n",
            sessions.display().to_string(),
            agent.display().to_string(),
        );
        std::fs::write(dir.join("sessions.toml"), &text).unwrap();
        let port = common::authority::free_port();
        let r = common::run_with_env(
            ws.path(),
            &["serve", "--listen", &format!("127.0.0.1:{port}")],
            &[("FLOTILLA_AUTHORITY_DIR", dir.to_str().unwrap())],
        );
        assert_ne!(r.code, 0, "{writable}: {r:?}");
        assert!(r.stderr.contains(says), "{writable}: {}", r.stderr);
        assert!(
            r.stderr.contains("sessions.toml: 4:"),
            "{writable}: the error names the line: {}",
            r.stderr
        );
    }
}

#[test]
fn a_push_is_a_question_and_the_authority_pushes_exactly_that_commit_once() {
    let (s, _bin) = authority_with(WAITING_AGENT, "", "");
    let id = s.create(&["--prompt", "work"]);
    let tok = token(&s, id);
    let before = refs(&s.origin);

    // Nothing beyond the base: nothing to push.
    let r = as_runtime(&s, &tok, &["push", "origin", "HEAD:main"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("nothing to push"), "{}", r.stderr);

    // The agent commits in its tree (as the session's uid).
    let t = tree(&s, id);
    let uid = uid_of(&s, id);
    let out = as_user(
        &uid,
        &t,
        &["git", "commit", "-q", "--allow-empty", "-m", "agent-change"],
    );
    assert!(out.status.success(), "{out:?}");

    // Only `origin`, never a force push, never a tag or another namespace.
    for (args, says) in [
        (vec!["push", "elsewhere"], "only to its repository"),
        (
            vec!["push", "origin", "+HEAD:main"],
            "force pushes are not offered",
        ),
        (vec!["push", "origin", "HEAD:refs/tags/v1"], "only branches"),
        (vec!["push", "origin", "HEAD:-x"], "not a branch name"),
        (
            vec!["exec", "--", "git", "push", "--force", "origin"],
            "not offered",
        ),
    ] {
        let r = as_runtime(&s, &tok, &args);
        assert_ne!(r.code, 0, "{args:?}: {r:?}");
        assert!(r.stderr.contains(says), "{args:?}: {}", r.stderr);
    }

    // `flotilla push` and `flotilla exec -- git push` ask the same question.
    let r = as_runtime(&s, &tok, &["push", "origin", "HEAD:main"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("agent-change"), "{}", r.stderr);
    let r2 = as_runtime(
        &s,
        &tok,
        &["exec", "--", "git", "push", "-q", "origin", "HEAD:main"],
    );
    assert_eq!(r2.code, 126, "not run yet: {r2:?}");
    let q = s.run(&["questions", "--json"]).json();
    let qs: Vec<_> = q["questions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["session"] == id)
        .cloned()
        .collect();
    assert_eq!(qs.len(), 1, "one question for one exact push: {q:#}");
    let doc = &qs[0]["doc"];
    assert_eq!(doc["tool_name"], "Push");
    let commit = as_user(&uid, &t, &["git", "rev-parse", "HEAD"]);
    let commit = String::from_utf8_lossy(&commit.stdout).trim().to_string();
    assert_eq!(doc["tool_input"]["commit"], commit.as_str(), "{doc:#}");
    assert_eq!(doc["tool_input"]["branch"], "main");
    assert!(doc["tool_input"]["diffstat"].is_string(), "{doc:#}");
    assert_eq!(
        refs(&s.origin),
        before,
        "nothing is pushed before the answer"
    );

    // Denied: nothing pushed; asked again, a new question.
    let qid = qs[0]["id"].as_u64().unwrap().to_string();
    let r = s.run(&["question", "answer", &qid, "deny"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("denied"), "{r:?}");
    assert_eq!(refs(&s.origin), before);
    let r = as_runtime(&s, &tok, &["push", "origin", "HEAD:main"]);
    assert_eq!(r.code, 1, "{r:?}");
    let q = s.run(&["questions", "--json"]).json();
    let open: Vec<_> = q["questions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["session"] == id && q["doc"]["answer"].is_null())
        .cloned()
        .collect();
    assert_eq!(open.len(), 1, "{q:#}");

    // Allowed: exactly that commit lands on the remote's `main`, once.
    let qid = open[0]["id"].as_u64().unwrap().to_string();
    let r = s.run(&["question", "answer", &qid, "allow"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stdout.contains("pushed"), "{r:?}");
    assert_eq!(git(&s.origin, &["rev-parse", "main"]), commit);
    let again = s.run(&["question", "answer", &qid, "allow"]);
    assert_eq!(again.code, 1, "{again:?}");
    let pushes: Vec<_> = s
        .events_of(id, "push")
        .into_iter()
        .filter(|p| p["outcome"] == "pushed")
        .collect();
    assert_eq!(pushes.len(), 1, "{pushes:#?}");

    // The default destination is the session's own branch, never `main`.
    let out = as_user(
        &uid,
        &t,
        &["git", "commit", "-q", "--allow-empty", "-m", "second"],
    );
    assert!(out.status.success(), "{out:?}");
    let r = as_runtime(&s, &tok, &["push"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains(&format!("flotilla/session-{id}")),
        "{}",
        r.stderr
    );
}

/// Runs every shape of the adversarial suite with bash inside the session's
/// sandbox, in its tree, each bounded in time, then leaves `shapes-done` in its home.
fn shape_runner(shapes: &[String]) -> String {
    let mut s = String::from(
        "#!/bin/bash\n\
         n=0\n\
         while IFS= read -r line; do\n\
         \x20 n=$((n+1))\n\
         \x20 git checkout -q -f HEAD >/dev/null 2>&1\n\
         \x20 timeout -k 1 10 bash -c \"$line\" </dev/null >>\"$HOME/shapes.log\" 2>&1\n\
         \x20 echo \"$n $?\" >>\"$HOME/shapes.status\"\n\
         done <<'FLOTILLA_SHAPES_END'\n",
    );
    for l in shapes {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str("FLOTILLA_SHAPES_END\necho \"$n\" > \"$HOME/shapes-done\"\nexec sleep 600\n");
    s
}

/// The shapes of `crates/flotilla-sessions/tests/adversarial-shapes.txt`.
fn adversarial_shapes() -> Vec<String> {
    let path = common::repo_root().join("crates/flotilla-sessions/tests/adversarial-shapes.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn no_adversarial_shape_run_inside_the_sandbox_changes_the_remote() {
    let shapes = adversarial_shapes();
    assert!(shapes.len() >= 300, "{} shapes", shapes.len());
    let (s, _bin) = authority_with(&shape_runner(&shapes), "", "");
    let before = refs(&s.origin);
    let objects_before = git(&s.origin, &["count-objects", "-v"]);
    let id = s.create(&["--prompt", "run the shapes"]);
    let done =
        s.a.ws
            .path()
            .join(format!("sessions/{id}/home/shapes-done"));
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(900), || done.exists()),
        "the shapes never finished: {:#}",
        s.show(id)
    );
    let ran: usize = std::fs::read_to_string(&done)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(ran, shapes.len());
    assert_eq!(
        refs(&s.origin),
        before,
        "a shape changed the remote from inside the sandbox"
    );
    assert_eq!(
        git(&s.origin, &["count-objects", "-v"]),
        objects_before,
        "a shape wrote objects into the remote"
    );
    // And no shape reached anything outside: the sandbox has no network of its
    // own, and the authority's relay let nothing through ([egress] allow is empty).
    let through: Vec<_> = s
        .events_of(id, "egress")
        .into_iter()
        .filter(|e| e["allowed"] == true)
        .collect();
    assert!(through.is_empty(), "{through:#?}");
}

/// Runs `line` with bash in `work`, confined the way a runtime was before the
/// remote was taken out of its reach: bubblewrap as an unprivileged uid, the file
/// system read-only but `ws` (the remote and the clone live there, writable), no
/// network, private `/tmp`, `HOME` inside `ws`. Nothing of it reaches this machine.
fn confined(ws: &Path, work: &Path, uid: u32, line: &str) {
    let _ = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            "timeout",
            "-k",
            "1",
            "10",
            "bwrap",
            "--ro-bind",
            "/",
            "/",
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--tmpfs",
            "/tmp",
            "--tmpfs",
            "/var/tmp",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/root",
            "--bind",
        ])
        .arg(ws)
        .arg(ws)
        .args([
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--chdir",
        ])
        .arg(work)
        .args(["--", "bash", "-c", line])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", ws.join("home"))
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[test]
fn the_same_shapes_push_where_a_runtime_could_write_the_remote() {
    // What makes the suite mean something: with the remote writable (as sessions
    // were once configured), the shapes really push; only the remote being out of
    // reach stops them in the sandbox test above.
    let shapes = adversarial_shapes();
    let ws = tempfile::tempdir().unwrap();
    common::sessions::open_up(ws.path());
    let src = ws.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(ws.path().join("home")).unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    std::fs::write(src.join("README.md"), "x\n").unwrap();
    git(&src, &["add", "."]);
    git(&src, &["commit", "-qm", "first"]);
    let origin = ws.path().join("origin.git");
    let o = origin.to_str().unwrap();
    git(
        ws.path(),
        &["clone", "-q", "--bare", src.to_str().unwrap(), o],
    );
    let work = ws.path().join("work");
    git(ws.path(), &["clone", "-q", o, work.to_str().unwrap()]);
    // An unprivileged uid of its own owns the lot.
    let uid = 61100u32;
    let st = Command::new("chown")
        .args(["-R", &format!("{uid}:{uid}")])
        .arg(ws.path())
        .status()
        .unwrap();
    assert!(st.success());
    let mut missed = Vec::new();
    for line in &shapes {
        let _ = git(&origin, &["update-ref", "-d", "refs/heads/pwned"]);
        confined(ws.path(), &work, uid, line);
        if !git(&origin, &["for-each-ref", "refs/heads/pwned"]).contains("pwned") {
            missed.push(line.clone());
        }
    }
    eprintln!(
        "{} of {} shapes pushed where the remote was writable",
        shapes.len() - missed.len(),
        shapes.len()
    );
    // A handful need what a confined bash lacks (a terminal, a login shell's
    // files); the rest must really push.
    assert!(
        missed.len() * 20 <= shapes.len(),
        "{} of {} shapes did not push where the remote was writable: {missed:#?}",
        missed.len(),
        shapes.len()
    );
}

/// Nesting that overflowed a 2 MiB stack in the parser.
fn deep(open: &str, close: &str, n: usize) -> String {
    format!("{}echo x{}", open.repeat(n), close.repeat(n))
}

#[test]
fn pathological_tool_calls_are_answered_and_the_authority_keeps_running() {
    let (s, _bin) = authority_with(WAITING_AGENT, "", "");
    let id = s.create(&["--prompt", "work"]);
    let tok = token(&s, id);
    let session = client(&s, &tok);
    let mut lines = vec![
        deep("$(", ")", 2000),
        deep("${x:-", "}", 2000),
        deep("if true; then ", "; fi", 2000),
        deep("$((", "))", 2000),
        deep("(", ")", 5000),
        deep("{ ", "; }", 5000),
        deep("[[ ( ", " ) ]]", 2000),
        deep("`", "`", 64),
        format!("echo {}", "a".repeat(1 << 20)),
    ];
    let corpus = common::repo_root().join("crates/flotilla-sessions/tests/corpus");
    if let Ok(entries) = std::fs::read_dir(&corpus) {
        for e in entries.flatten() {
            lines.push(String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned());
        }
    }
    for line in &lines {
        let body = bash_payload(line).to_string().into_bytes();
        let answer = post_raw(&session, "/v1/gate/hook", body)
            .unwrap_or_else(|e| panic!("{} bytes: {e}", line.len()));
        assert_ne!(
            decision(&answer),
            "allow",
            "{}…",
            &line[..40.min(line.len())]
        );
    }
    // A payload larger than the gate reads: a deny, answered with 200.
    let huge = bash_payload(&"a".repeat(9 << 20)).to_string().into_bytes();
    let answer = post_raw(&session, "/v1/gate/hook", huge).expect("answered, not refused");
    assert_eq!(decision(&answer), "deny");
    // Still up, and still deciding.
    let r = s.run(&["session", "show", &id.to_string(), "--json"]);
    assert_eq!(r.code, 0, "{r:?}");
    let answer = post_raw(
        &session,
        "/v1/gate/hook",
        bash_payload("git push origin main")
            .to_string()
            .into_bytes(),
    )
    .unwrap();
    assert_eq!(decision(&answer), "defer");
}

#[test]
fn credentials_are_checked_before_bodies_and_the_command_hook_fails_closed() {
    let (s, _bin) = authority_with(WAITING_AGENT, "", "");
    let id = s.create(&["--prompt", "work"]);
    let tok = token(&s, id);

    // A garbage credential learns nothing of a route's body: 401, not 422.
    for path in [
        "/v1/exec",
        "/v1/push",
        "/v1/sessions",
        "/v1/questions/1/answer",
    ] {
        let err = post_raw(&client(&s, "garbage"), path, b"{\"nope\": 1}".to_vec()).unwrap_err();
        assert!(err.to_string().contains("401"), "{path}: {err}");
    }
    // The HTTP hook with no credential at all: a deny, answered with 200.
    let nobody = client(&s, "flt-session-0000");
    let answer = post_raw(
        &nobody,
        "/v1/gate/hook",
        bash_payload("ls").to_string().into_bytes(),
    )
    .unwrap();
    assert_eq!(decision(&answer), "deny");

    let ca = s.a.ws.path().join("hook-ca.pem");
    std::fs::write(&ca, operator(&s)["ca_pem"].as_str().unwrap()).unwrap();
    let hook = |payload: Vec<u8>, close_stdout: bool| {
        let shell = if close_stdout {
            "exec \"$0\" gate hook --timeout 10s >&-"
        } else {
            "exec \"$0\" gate hook --timeout 10s"
        };
        let mut child = Command::new("sh")
            .args(["-c", shell, env!("CARGO_BIN_EXE_flotilla")])
            .env("FLOTILLA_SERVER", &s.a.url)
            .env("FLOTILLA_CA", &ca)
            .env("FLOTILLA_SESSION_TOKEN", &tok)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let _ = stdin.write_all(&payload);
        });
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out
    };
    // A 10 MiB payload: exit 2 with the reason, never a death by SIGPIPE.
    let out = hook(
        bash_payload(&"a".repeat(10 << 20)).to_string().into_bytes(),
        false,
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at most"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Standard output closed: no decision can be given, so exit 2, not 0.
    let out = hook(bash_payload("ls").to_string().into_bytes(), true);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard output is closed"));
    // Input cut short (not JSON): exit 2.
    let out = hook(b"{\"tool_name\": \"Ba".to_vec(), false);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    // A good call still answers on stdout with exit 0.
    let out = hook(bash_payload("rm -rf build").to_string().into_bytes(), false);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(decision(&out.stdout), "defer");
}

#[test]
fn another_local_user_reads_none_of_a_sessions_files() {
    let (s, _bin) = authority_with(WAITING_AGENT, "", "");
    let id = s.create(&["--prompt", "secret work"]);
    let _tok = token(&s, id);
    let sdir = s.a.ws.path().join(format!("sessions/{id}"));
    // `daemon`: another unprivileged user of the host (Debian has it).
    let other = "daemon";
    for path in [
        s.a.dir.join("authority.db"),
        sdir.join("tree/README.md"),
        sdir.join("home/token"),
        sdir.join("run/token"),
        sdir.join("run/prompt"),
        sdir.join("runtime-1.jsonl"),
        sdir.join("runtime-1.stderr"),
    ] {
        assert!(path.exists(), "{} should exist", path.display());
        let out = as_user(other, Path::new("/"), &["cat", path.to_str().unwrap()]);
        assert!(!out.status.success(), "{other} read {}", path.display());
    }
    for dir in [
        sdir.clone(),
        sdir.join("tree"),
        sdir.join("home"),
        sdir.join("run"),
    ] {
        let out = as_user(other, Path::new("/"), &["ls", dir.to_str().unwrap()]);
        assert!(!out.status.success(), "{other} listed {}", dir.display());
    }
    for (path, mode) in [
        (sdir.join("tree"), 0o700),
        (sdir.join("home"), 0o700),
        (sdir.join("runtime-1.jsonl"), 0o600),
        (sdir.join("runtime-1.stderr"), 0o600),
    ] {
        let m = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(m, mode, "{}: {m:o}", path.display());
    }
    // The session's own uid still reaches its tree; the runtime user of other
    // daemons (`nobody`) and another session's uid reach nothing of it.
    let out = as_user(
        &uid_of(&s, id),
        &sdir.join("tree"),
        &["git", "status", "--short"],
    );
    assert!(out.status.success(), "{out:?}");
    let other_session = s.create(&["--prompt", "other"]);
    let _ = token(&s, other_session);
    for user in ["nobody".to_string(), uid_of(&s, other_session)] {
        for path in [sdir.join("home/token"), sdir.join("tree/README.md")] {
            let out = as_user(&user, Path::new("/"), &["cat", path.to_str().unwrap()]);
            assert!(!out.status.success(), "{user} read {}", path.display());
        }
    }
}

#[test]
fn one_session_cannot_hold_every_executor_slot() {
    let (s, _bin) = authority_with(
        WAITING_AGENT,
        "",
        "[executor]\nallow = [[\"sleep\"], [\"true\"]]\nmax_running = 4\nmax_running_per_session = 1\n",
    );
    let a = s.create(&["--prompt", "a"]);
    let b = s.create(&["--prompt", "b"]);
    let (ta, tb) = (token(&s, a), token(&s, b));
    let marker = "7.31";
    let long = {
        let (s_url, ca) = (
            s.a.url.clone(),
            operator(&s)["ca_pem"].as_str().unwrap().to_string(),
        );
        let ta = ta.clone();
        std::thread::spawn(move || {
            let c = flotilla_api::Client::new(&s_url, &ca, Some(ta)).unwrap();
            let body = serde_json::json!({"argv": ["sleep", marker]})
                .to_string()
                .into_bytes();
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(c.post_bytes("/v1/exec", body, Duration::from_secs(60)))
        })
    };
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || {
            !common::pids_with_arg(marker).is_empty()
        }),
        "the long read never started"
    );
    let err = post_raw(
        &client(&s, &ta),
        "/v1/exec",
        serde_json::json!({"argv": ["true"]})
            .to_string()
            .into_bytes(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("429"), "{err}");
    assert!(err.to_string().contains("max_running_per_session"), "{err}");
    let ok = post_raw(
        &client(&s, &tb),
        "/v1/exec",
        serde_json::json!({"argv": ["true"]})
            .to_string()
            .into_bytes(),
    )
    .expect("another session still runs");
    let v: serde_json::Value = serde_json::from_slice(&ok).unwrap();
    assert_eq!(v["outcome"], "ran", "{v:#}");
    long.join().unwrap().expect("the long read ran");
    // Its place is given back when it ends.
    let again = post_raw(
        &client(&s, &ta),
        "/v1/exec",
        serde_json::json!({"argv": ["true"]})
            .to_string()
            .into_bytes(),
    )
    .expect("a's place came back");
    let v: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(v["outcome"], "ran", "{v:#}");
}

/// The stand-in agent for the home reset: its first runtime plants start-up files
/// (and a link) in its home; the next one lists what it finds there.
const PLANTING_AGENT: &str = r#"#!/bin/sh
if [ -e "$HOME/booted" ]; then
  { ls -A "$HOME"; echo ---; ls -A "$HOME/.claude"; echo ---; ls -A "$HOME/.claude/projects/p"; } > "$HOME/listing.tmp"
  mv "$HOME/listing.tmp" "$HOME/listing"
else
  : > "$HOME/booted"
  echo 'git push origin HEAD:main' > "$HOME/.bashrc"
  mkdir -p "$HOME/.claude/projects/p" "$HOME/.claude/shell-snapshots" "$HOME/.ssh" "$HOME/.config/git"
  echo '{"mcpServers": {"x": {"command": "sh"}}}' > "$HOME/.claude.json"
  echo '{"hooks": {}}' > "$HOME/.claude/settings.json"
  echo 'transcript' > "$HOME/.claude/projects/p/t.jsonl"
  echo 'alias ls="git push"' > "$HOME/.claude/shell-snapshots/snapshot.sh"
  echo 'Host *' > "$HOME/.ssh/config"
  echo '[core]' > "$HOME/.config/git/config"
  ln -s /etc/hostname "$HOME/.profile"
fi
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
exec sleep 600
"#;

#[test]
fn a_homes_start_up_files_are_reset_before_every_runtime() {
    let (s, _bin) = authority_with(PLANTING_AGENT, "", "");
    let id = s.create(&["--prompt", "plant"]);
    let _ = token(&s, id);
    let home = s.a.ws.path().join(format!("sessions/{id}/home"));
    assert!(home.join(".bashrc").exists());
    let r = s.run(&["session", "stop", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    let r = s.run(&["session", "send", &id.to_string(), "again"]);
    assert_eq!(r.code, 0, "{r:?}");
    let listing = home.join("listing");
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(30), || listing.exists()),
        "{:#}",
        s.show(id)
    );
    let seen = std::fs::read_to_string(&listing).unwrap();
    let parts: Vec<Vec<&str>> = seen.split("---\n").map(|p| p.lines().collect()).collect();
    // The home: the agent's own non-dot files and `.claude`, nothing else.
    assert!(
        parts[0]
            .iter()
            .all(|e| !e.starts_with('.') || *e == ".claude"),
        "{seen}"
    );
    assert!(parts[0].contains(&"booted"), "{seen}");
    // `.claude`: the transcripts only, kept whole.
    assert_eq!(parts[1], vec!["projects"], "{seen}");
    assert_eq!(parts[2], vec!["t.jsonl"], "{seen}");
    // The link was removed, its target left alone.
    assert!(Path::new("/etc/hostname").exists());
    let reset = s.events_of(id, "home-reset");
    assert_eq!(reset.len(), 1, "{reset:#?}");
    let removed: Vec<&str> = reset[0]["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for planted in [
        ".bashrc",
        ".claude.json",
        ".claude/settings.json",
        ".claude/shell-snapshots",
        ".config",
        ".profile",
        ".ssh",
    ] {
        assert!(removed.contains(&planted), "{planted} not in {removed:?}");
    }
}

/// The stand-in agent for the network: it tries the CONNECT proxy (an allowed
/// destination and another), the host's loopback directly, and the authority's
/// API through its bridge (`flotilla exec`), and writes what happened.
const NETWORK_AGENT: &str = r#"#!/bin/bash
connect() {  # connect PORT: a CONNECT through the proxy; prints the status line and the first line after
  exec 3<>/dev/tcp/127.0.0.1/17481 || { echo "no proxy"; return; }
  printf 'CONNECT 127.0.0.1:%s HTTP/1.1\r\nHost: 127.0.0.1:%s\r\n\r\n' "$1" "$1" >&3
  read -r -t 10 status <&3
  echo "status ${status%$'\r'}"
  while read -r -t 10 line <&3; do [ "${line%$'\r'}" = "" ] && break; done
  read -r -t 10 greeting <&3
  echo "greeting $greeting"
  exec 3<&-
}
{
  echo "allowed:"; connect "$OK_PORT"
  echo "refused:"; connect "$BAD_PORT"
  echo "direct:"
  if timeout 5 bash -c "exec 3<>/dev/tcp/127.0.0.1/$OK_PORT" 2>/dev/null; then echo reached; else echo unreachable; fi
  echo "api:"; flotilla exec -- seq 3 2>&1 | tr '\n' ' '; echo
  echo "key: $ANTHROPIC_API_KEY"
} > "$HOME/net.tmp" 2>&1
mv "$HOME/net.tmp" "$HOME/net"
cat "$FLOTILLA_SESSION_TOKEN_FILE" > "$HOME/token.tmp" && mv "$HOME/token.tmp" "$HOME/token"
exec sleep 600
"#;

/// A loopback server that greets every connection; its port and how many it had.
fn greeter() -> (u16, Arc<AtomicUsize>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let c = count.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            c.fetch_add(1, Ordering::SeqCst);
            let mut conn = conn;
            use std::io::Write;
            let _ = conn.write_all(b"hello\n");
        }
    });
    (port, count)
}

#[test]
fn a_runtime_reaches_only_what_the_authority_relays() {
    let (ok, ok_count) = greeter();
    let (bad, bad_count) = greeter();
    let bin = tempfile::tempdir().unwrap();
    common::sessions::open_up(bin.path());
    let agent = script(bin.path(), "agent", NETWORK_AGENT);
    let (ok_s, bad_s) = (ok.to_string(), bad.to_string());
    let s = SessionsAuthority::new(
        &agent,
        &[("OK_PORT", ok_s.as_str()), ("BAD_PORT", bad_s.as_str())],
        "",
        &format!("[egress]\nallow = [\"127.0.0.1:{ok}\"]\n\n[executor]\nallow = [[\"seq\"]]\n"),
    );
    let id = s.create(&["--prompt", "probe the network"]);
    let out = s.a.ws.path().join(format!("sessions/{id}/home/net"));
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(60), || out.exists()),
        "{:#}",
        s.show(id)
    );
    let seen = std::fs::read_to_string(&out).unwrap();
    let section = |name: &str| -> String {
        seen.split(&format!("{name}:\n"))
            .nth(1)
            .unwrap_or_default()
            .lines()
            .take_while(|l| !l.ends_with(':'))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(section("allowed").contains("status HTTP/1.1 200"), "{seen}");
    assert!(section("allowed").contains("greeting hello"), "{seen}");
    assert!(section("refused").contains("status HTTP/1.1 403"), "{seen}");
    assert_eq!(section("direct"), "unreachable", "{seen}");
    assert!(section("api").contains("1 2 3"), "{seen}");
    assert!(
        seen.contains(&format!(
            "key: {}",
            flotilla_server::egress::PLACEHOLDER_KEY
        )),
        "{seen}"
    );
    // The refused destination was never connected; the allowed one once.
    assert_eq!(bad_count.load(Ordering::SeqCst), 0);
    assert_eq!(ok_count.load(Ordering::SeqCst), 1);
    // Every CONNECT is an event, allowed or not.
    let egress = s.events_of(id, "egress");
    assert!(
        egress
            .iter()
            .any(|e| e["target"] == format!("127.0.0.1:{ok}") && e["allowed"] == true),
        "{egress:#?}"
    );
    assert!(
        egress
            .iter()
            .any(|e| e["target"] == format!("127.0.0.1:{bad}") && e["allowed"] == false),
        "{egress:#?}"
    );
}

/// `/proc/PID/status` fields.
fn status_of(pid: u32) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// The children of `pid` whose command line holds `word`.
fn children_with(pid: u32, word: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            status_of_opt(*p)
                .is_some_and(|s| s.get("PPid").map(String::as_str) == Some(&pid.to_string()))
                && common::cmdline(*p).iter().any(|a| a == word)
        })
        .collect()
}

fn status_of_opt(pid: u32) -> Option<std::collections::HashMap<String, String>> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .map(|t| {
            t.lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_string(), v.trim().to_string()))
                .collect()
        })
}

#[test]
fn the_api_runs_unprivileged_and_only_the_launcher_is_root() {
    // The executor's credential: a file only root reads (a kubeconfig, say).
    let (s, _bin) = authority_with(WAITING_AGENT, "", "[executor]\nallow = [[\"cat\"]]\n");
    // A remote another user owns (root here) is still read by the API's uid (git's
    // safe.directory, given to the clone cache's own git only).
    let st = Command::new("chown")
        .args(["-R", "0:0"])
        .arg(&s.origin)
        .status()
        .unwrap();
    assert!(st.success());
    // The executor's credential: a file only the executor's user reads.
    let executor_uid: u32 = flotilla_server::privsep::DEFAULT_EXECUTOR_USER
        .parse()
        .unwrap();
    let secret = s.a.ws.path().join("executor-credential");
    std::fs::write(&secret, "kube-secret-0xfeed\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    nix::unistd::chown(
        &secret,
        Some(nix::unistd::Uid::from_raw(executor_uid)),
        Some(nix::unistd::Gid::from_raw(executor_uid)),
    )
    .unwrap();
    let api = s.a.pid().expect("running");
    let st = status_of(api);
    let api_uid = flotilla_server::privsep::DEFAULT_API_USER;
    assert_eq!(
        st["Uid"].split_whitespace().collect::<Vec<_>>(),
        vec![api_uid; 4],
        "{st:?}"
    );
    assert_eq!(st["Gid"].split_whitespace().next(), Some(api_uid));
    assert_eq!(st["CapEff"], "0000000000000000", "{st:?}");
    assert_eq!(st["CapPrm"], "0000000000000000", "{st:?}");
    assert_eq!(st["NoNewPrivs"], "1", "{st:?}");
    // Its two children: the launcher (root) and the executor (its own uid).
    let launcher = children_with(api, "launcher");
    assert_eq!(launcher.len(), 1, "{launcher:?}");
    assert_eq!(
        status_of(launcher[0])["Uid"].split_whitespace().next(),
        Some("0"),
        "the launcher is root"
    );
    let executor = children_with(api, "executor");
    assert_eq!(executor.len(), 1);
    assert_eq!(
        status_of(executor[0])["Uid"].split_whitespace().next(),
        Some(executor_uid.to_string().as_str()),
        "the executor is not root"
    );

    // The API's uid cannot read the executor's credential; the executor can.
    let out = as_user(api_uid, Path::new("/"), &["cat", secret.to_str().unwrap()]);
    assert!(!out.status.success(), "the API's uid read it");
    let id = s.create(&["--prompt", "work"]);
    let tok = token(&s, id);
    let ran = post_raw(
        &client(&s, &tok),
        "/v1/exec",
        serde_json::json!({"argv": ["cat", secret.to_str().unwrap()]})
            .to_string()
            .into_bytes(),
    )
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ran).unwrap();
    assert_eq!(v["stdout"], "kube-secret-0xfeed\n", "{v:#}");

    // The launcher starts nothing as root, nothing but the runtime programs, and
    // kills only what it started: asked on its own socket, it refuses.
    use flotilla_server::privsep::launcher::{call, Request};
    let socket =
        s.a.dir
            .join("run")
            .join(flotilla_server::privsep::LAUNCHER_SOCKET);
    let devnull = std::fs::File::open("/dev/null").unwrap();
    use std::os::fd::AsRawFd;
    let fds = [
        devnull.as_raw_fd(),
        devnull.as_raw_fd(),
        devnull.as_raw_fd(),
    ];
    let spawn = |uid: u32, program: &str| Request::Spawn {
        id,
        uid,
        repo: "infra".into(),
        program: program.into(),
        args: vec![],
        env: vec![],
    };
    for (req, says) in [
        (spawn(0, "claude"), "not a session uid"),
        (spawn(61183, "claude"), "not a session uid"),
        (spawn(61184, "/bin/sh"), "not a runtime program"),
        (
            Request::Kill { pid: 1 },
            "not a runtime this launcher started",
        ),
        (
            Request::Own {
                id: 9999,
                uid: 61184,
            },
            "No such file",
        ),
    ] {
        let e = call(&socket, &req, &fds).unwrap_err();
        assert!(e.to_string().contains(says), "{req:?}: {e}");
    }
    // Only the API's uid (and root) may even connect.
    let st = std::fs::metadata(&socket).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(st.mode() & 0o777, 0o600);
    assert_eq!(st.uid().to_string(), api_uid);
}

#[test]
fn the_privileged_pieces_die_with_the_api_and_a_restart_keeps_sessions_working() {
    let (mut s, _bin) = authority_with(WAITING_AGENT, "", "");
    let id = s.create(&["--prompt", "work"]);
    let _ = token(&s, id);
    let api = s.a.pid().expect("running");
    let launcher = children_with(api, "launcher");
    let executor = children_with(api, "executor");
    let runtime = s.show(id)["doc"]["runtime"]["pid"].as_u64().unwrap() as u32;
    let tree = tree(&s, id);
    use std::os::unix::fs::MetadataExt;
    let owner = std::fs::metadata(&tree).unwrap().uid();
    // However the API ends (here SIGKILL), nothing privileged outlives it.
    s.a.kill9();
    let all: Vec<u32> = launcher
        .iter()
        .chain(&executor)
        .copied()
        .chain([runtime])
        .collect();
    assert!(
        flotilla_testkit::wait_until(Duration::from_secs(20), || {
            all.iter()
                .all(|p| flotilla_exec::process_start_ticks(*p).is_none())
        }),
        "still running after the API died: {:?}",
        all.iter()
            .filter(|p| flotilla_exec::process_start_ticks(**p).is_some())
            .collect::<Vec<_>>()
    );
    // Started again, it keeps the session's files the session's: the next message
    // boots a runtime in the same tree.
    s.a.start();
    assert_eq!(std::fs::metadata(&tree).unwrap().uid(), owner);
    let r = s.run(&["session", "send", &id.to_string(), "again"]);
    assert_eq!(r.code, 0, "{r:?}");
    let shown = s.wait_state(id, "working", Duration::from_secs(30));
    assert_eq!(shown["doc"]["boots"], 2, "{shown:#}");
    assert_eq!(std::fs::metadata(&tree).unwrap().uid(), owner);
}
