//! `flotilla adopt` against real processes on 127.0.0.1: a stand-in service started
//! by hand (`flotilla-testkit`, a child of the test, in its own working directory and
//! with an environment variable of its own) is moved to Flotilla as a plan shown
//! first, proven by the acceptance (its port held by Flotilla's instance, its
//! readiness and its dependent's), and rolled back to exactly its command line,
//! working directory and environment; a service that differs from its declaration
//! (another port, another binary) is refused with the differences and nothing
//! changes; and `kill -9` of the CLI while it stops the prior owner, or while
//! Flotilla's instance starts, leaves a record that `status` and the next `adopt`
//! name, which `--rollback` or `--resume` finish. Every wait is on a condition.

mod common;

use common::{cmdline, kill9, lines_of, pids_with_arg, Run, Workspace};
use flotilla_testkit::{alive, free_port, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(30);

fn testkit() -> String {
    flotilla_testkit::binary().display().to_string()
}

/// A TOML string.
fn q(s: &str) -> String {
    serde_json::to_string(s).expect("a string")
}

/// A service started by hand: a child of the test, listening on 127.0.0.1:`port`.
struct Hand {
    child: Child,
    lines: Receiver<String>,
    argv: Vec<String>,
}

impl Hand {
    /// `flotilla-testkit ARGS` in `cwd`, with `ADOPT_TEST_MARK=<mark>` added to its
    /// environment, once it listens.
    fn start(args: &[String], cwd: &Path, mark: &str) -> Hand {
        let mut child = Command::new(flotilla_testkit::binary())
            .args(args)
            .current_dir(cwd)
            .env("ADOPT_TEST_MARK", mark)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start flotilla-testkit");
        let lines = lines_of(child.stdout.take().expect("its stdout"));
        let h = Hand {
            child,
            lines,
            argv: std::iter::once(testkit())
                .chain(args.iter().cloned())
                .collect(),
        };
        assert!(
            h.saw("LISTENING "),
            "the hand-started service did not listen"
        );
        h
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for a line starting with `prefix` on its stdout.
    fn saw(&self, prefix: &str) -> bool {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.starts_with(prefix) => return true,
                Ok(_) => continue,
                Err(_) => return false,
            }
        }
    }
}

impl Drop for Hand {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test's world: a workspace with its inventory, its state directory, and the
/// marker every service it starts carries (`--exec-name MARKER`): on drop, whatever
/// carries it is killed (the restored prior owner and Flotilla's instance included).
struct World {
    ws: Workspace,
    marker: String,
    hand_dir: tempfile::TempDir,
}

impl World {
    fn new(test: &str) -> World {
        World {
            ws: Workspace::new(),
            marker: format!("flt-adopt-{test}-{}", std::process::id()),
            hand_dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// The service's arguments: listening on `port`, the marker, `extra`.
    fn args(&self, port: u16, extra: &[&str]) -> Vec<String> {
        let mut a = vec![
            "--listen".to_string(),
            format!("127.0.0.1:{port}"),
            "--exec-name".into(),
            self.marker.clone(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    /// Starts the service by hand in its own directory.
    fn hand(&self, port: u16, extra: &[&str]) -> Hand {
        Hand::start(&self.args(port, extra), self.hand_dir.path(), &self.marker)
    }

    /// An inventory: `llm` running `program ARGS` on `port` (ready when `/health`
    /// answers 200), stopped within `grace`, and `chat`, an external service that
    /// depends on it, answering on `chat_port`.
    fn inventory(&self, program: &str, port: u16, extra: &[&str], grace: &str, chat_port: u16) {
        let command: Vec<String> = std::iter::once(program.to_string())
            .chain(self.args(port, extra))
            .map(|a| q(&a))
            .collect();
        self.ws.write(
            "flotilla.toml",
            &format!(
                "[components.llm]\ncommand = [{}]\n\
                 endpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"100ms\" }}\n\
                 stop = {{ grace_period = {} }}\n\n\
                 [components.chat]\nowner = \"external\"\ndepends_on = [\"llm\"]\n\
                 endpoints = {{ http = \"http://127.0.0.1:{chat_port}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }} }}\n",
                command.join(", "),
                q(grace),
            ),
        );
    }

    fn run(&self, args: &[&str]) -> Run {
        self.ws.run(args)
    }

    /// `flotilla ARGS`, started and not waited for (stdout and stderr to null).
    fn spawn(&self, args: &[&str]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .current_dir(self.ws.path())
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_LOG")
            .env("FLOTILLA_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start flotilla")
    }

    fn state(&self) -> PathBuf {
        self.ws.path().join(".flotilla-state")
    }

    /// The adopt record of `llm`, when there is one.
    fn record(&self) -> Option<Value> {
        let p = common::project_dir(&self.state(), self.ws.path()).join("adopt/llm.json");
        std::fs::read_to_string(p)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
    }

    /// `status --json llm`: the component's status.
    fn llm(&self) -> Value {
        let run = self.run(&["status", "--json"]);
        let json = run.json();
        json["components"]
            .as_array()
            .expect("components")
            .iter()
            .find(|c| c["name"] == "llm")
            .cloned()
            .unwrap_or_else(|| panic!("no llm: {json:#}"))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for pid in pids_with_arg(&self.marker) {
            kill9(pid);
        }
    }
}

/// The value of `key` in `pid`'s environment.
fn environ(pid: u32, key: &str) -> Option<String> {
    let bytes = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let prefix = format!("{key}=");
    bytes
        .split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(prefix.as_bytes()))
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

/// The processes carrying `marker` other than `not`.
fn others(marker: &str, not: u32) -> Vec<u32> {
    pids_with_arg(marker)
        .into_iter()
        .filter(|&p| p != not && alive(p))
        .collect()
}

fn both(run: &Run) -> String {
    format!("{}\n{}", run.stdout, run.stderr)
}

#[test]
fn a_hand_started_process_is_adopted_as_a_shown_plan_and_rolled_back_exactly() {
    let w = World::new("roundtrip");
    let (port, chat_port) = (free_port(), free_port());
    let prior = w.hand(port, &[]);
    let chat = Hand::start(
        &["--listen".into(), format!("127.0.0.1:{chat_port}")],
        w.hand_dir.path(),
        "chat",
    );
    w.inventory(&testkit(), port, &[], "2s", chat_port);

    // The plan, with the baseline measured now; nothing changes.
    let dry = w.run(&["adopt", "llm", "--dry-run"]);
    assert_eq!(dry.code, 0, "{}", both(&dry));
    for want in [
        format!("adopt `llm` on local: from pid {}", prior.pid()),
        format!("ok   listening on port {port}: pid {}", prior.pid()),
        "ok   readiness of llm: GET".to_string(),
        "ok   readiness of chat (depends on llm)".to_string(),
        format!("stop pid {} with SIGTERM", prior.pid()),
        "run its command line again".to_string(),
        "dry run: nothing was changed".to_string(),
    ] {
        assert!(dry.stdout.contains(&want), "{want}:\n{}", both(&dry));
    }
    // Without a terminal to confirm on, --yes is needed.
    let unconfirmed = w.run(&["adopt", "llm"]);
    assert_eq!(unconfirmed.code, 2, "{}", both(&unconfirmed));
    assert!(
        unconfirmed.stderr.contains("--yes"),
        "{}",
        unconfirmed.stderr
    );
    assert!(alive(prior.pid()) && w.record().is_none());

    // Adopted: the prior process stopped, Flotilla's instance runs and passed.
    let run = w.run(&["adopt", "llm", "--yes", "--json"]);
    assert_eq!(run.code, 0, "{}", both(&run));
    let out = run.json();
    assert_eq!(out["result"], "adopted", "{out:#}");
    assert!(!alive(prior.pid()), "the prior owner still runs");
    let rec = w.record().expect("the record is kept");
    assert_eq!(rec["phase"], "adopted", "{rec:#}");
    assert_eq!(rec["prior"]["pid"], prior.pid(), "{rec:#}");
    assert!(
        Path::new(rec["backup"].as_str().expect("a backup")).exists(),
        "{rec:#}"
    );
    let shown = out["record"]["prior"]["env"].to_string();
    assert!(
        shown.contains("ADOPT_TEST_MARK") && !shown.contains(&w.marker),
        "environment values are not shown: {shown}"
    );
    for c in rec["acceptance"].as_array().unwrap() {
        assert_eq!(c["passed"], true, "{rec:#}");
    }
    let llm = w.llm();
    assert_eq!(llm["lifecycle"], "running", "{llm:#}");
    assert_eq!(llm["health"], "healthy", "{llm:#}");
    let ours = llm["runtime_identity"]["measured"]["pid"].as_u64().unwrap() as u32;
    assert_ne!(ours, prior.pid());
    // Again: nothing to adopt.
    let again = w.run(&["adopt", "llm", "--yes"]);
    assert_eq!(again.code, 0, "{}", both(&again));
    assert!(
        again.stdout.contains("already run by flotilla"),
        "{}",
        again.stdout
    );

    // Rolled back: Flotilla's instance stopped, the command line run again as it was.
    let back = w.run(&["adopt", "llm", "--rollback"]);
    assert_eq!(back.code, 0, "{}", both(&back));
    assert!(back.stdout.contains("rolled back"), "{}", both(&back));
    assert!(!alive(ours), "flotilla's instance still runs");
    let restored = others(&w.marker, prior.pid());
    assert_eq!(restored.len(), 1, "{restored:?}");
    let again = restored[0];
    assert_eq!(cmdline(again), prior.argv);
    assert_eq!(
        std::fs::read_link(format!("/proc/{again}/cwd")).unwrap(),
        std::fs::canonicalize(w.hand_dir.path()).unwrap()
    );
    assert_eq!(
        environ(again, "ADOPT_TEST_MARK").as_deref(),
        Some(w.marker.as_str())
    );
    let rec = w.record().unwrap();
    assert_eq!(rec["phase"], "rolled-back", "{rec:#}");
    assert_eq!(rec["prior"]["pid"], again, "{rec:#}");
    let llm = w.llm();
    assert_eq!(
        llm["lifecycle"], "stopped",
        "not flotilla's any more: {llm:#}"
    );
    assert!(llm["started_by"].to_string().contains("foreign"), "{llm:#}");
    drop(chat);
}

#[test]
fn a_service_that_differs_from_its_declaration_is_refused_with_the_differences() {
    let w = World::new("differs");
    let (port, other, chat_port) = (free_port(), free_port(), free_port());
    let prior = w.hand(port, &[]);

    // Declared on another port: found by its program, refused naming both ports.
    w.inventory(&testkit(), other, &[], "2s", chat_port);
    let run = w.run(&["adopt", "llm", "--yes"]);
    assert_eq!(run.code, 1, "{}", both(&run));
    for want in [
        format!("endpoint `http` declares port {other}; it does not listen there (it listens on {port})"),
        format!("it also listens on {port}, which no endpoint of `llm` declares"),
        "arguments: declared".to_string(),
        "nothing was changed".to_string(),
    ] {
        assert!(both(&run).contains(&want), "{want}:\n{}", both(&run));
    }

    // Declared with another binary (a copy elsewhere) on its port: refused.
    let copy = w.ws.path().join("other-testkit");
    std::fs::copy(flotilla_testkit::binary(), &copy).unwrap();
    w.inventory(&copy.display().to_string(), port, &[], "2s", chat_port);
    let run = w.run(&["adopt", "llm", "--yes", "--json"]);
    assert_eq!(run.code, 1, "{}", both(&run));
    let out = run.json();
    assert_eq!(out["refused"]["kind"], "differs", "{out:#}");
    let diffs = out["survey"]["differences"].to_string();
    assert!(
        diffs.contains(&format!("binary: declared `{}`", copy.display())),
        "{diffs}"
    );

    // Nothing changed.
    assert!(alive(prior.pid()));
    assert!(w.record().is_none());
    assert_eq!(others(&w.marker, prior.pid()), Vec::<u32>::new());
}

#[test]
fn kill_9_while_the_prior_owner_stops_leaves_a_record_status_names_and_rollback_undoes() {
    let w = World::new("kill-stop");
    let (port, chat_port) = (free_port(), free_port());
    // Slow to stop: it ignores SIGTERM, and the grace period is long.
    let prior = w.hand(port, &["--ignore-sigterm"]);
    w.inventory(&testkit(), port, &["--ignore-sigterm"], "600s", chat_port);
    let mut cli = w.spawn(&["adopt", "llm", "--yes"]);
    // The CLI is in the stop step once the prior owner got its SIGTERM.
    assert!(
        prior.saw("IGNORED SIGTERM"),
        "the prior owner was not asked to stop"
    );
    assert_eq!(w.record().expect("a record")["phase"], "stop-prior");
    cli.kill().unwrap();
    cli.wait().unwrap();

    let st = w.run(&["status"]);
    assert_eq!(st.code, 1, "{}", both(&st));
    assert!(
        st.stdout.contains(&format!(
            "ADOPT UNFINISHED: `llm` was stopping the prior owner (stop-prior, interrupted: its flotilla, pid {}, is gone)",
            cli.id()
        )),
        "{}",
        st.stdout
    );
    let again = w.run(&["adopt", "llm", "--yes"]);
    assert_eq!(again.code, 1, "{}", both(&again));
    assert!(
        again.stderr.contains("adopt llm --resume")
            && again.stderr.contains("adopt llm --rollback"),
        "{}",
        again.stderr
    );

    let back = w.run(&["adopt", "llm", "--rollback"]);
    assert_eq!(back.code, 0, "{}", both(&back));
    assert!(
        back.stderr.contains(&format!(
            "pid {} still runs: nothing to restore",
            prior.pid()
        )),
        "{}",
        both(&back)
    );
    assert!(alive(prior.pid()));
    assert_eq!(
        others(&w.marker, prior.pid()),
        Vec::<u32>::new(),
        "two owners"
    );
    assert_eq!(w.record().unwrap()["phase"], "rolled-back");
    let st = w.run(&["status"]);
    assert!(!st.stdout.contains("ADOPT UNFINISHED"), "{}", st.stdout);
}

/// `GET /health` on 127.0.0.1:`port` answers 200.
fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}

#[test]
fn kill_9_while_flotillas_instance_starts_then_resume_finishes_without_a_second_copy() {
    let w = World::new("kill-start");
    let (port, chat_port) = (free_port(), free_port());
    // Slow to become ready: /health answers 503 for 8 s after it listens.
    let slow = ["--status-before-ready", "503", "--ready-after", "8000"];
    let prior = w.hand(port, &slow);
    assert!(
        wait_until(DEADLINE, || healthy(port)),
        "the prior owner never became ready"
    );
    w.inventory(&testkit(), port, &slow, "2s", chat_port);
    let mut cli = w.spawn(&["adopt", "llm", "--yes"]);
    // Flotilla's instance runs (not ready yet) while the record says `start`.
    let mut ours = Vec::new();
    assert!(wait_until(DEADLINE, || {
        ours = others(&w.marker, prior.pid());
        !ours.is_empty() && w.record().is_some_and(|r| r["phase"] == "start")
    }));
    assert!(
        !healthy(port),
        "flotilla's instance was ready before the kill"
    );
    cli.kill().unwrap();
    cli.wait().unwrap();
    assert!(!alive(prior.pid()));

    let st = w.run(&["status"]);
    assert!(
        st.stdout.contains(
            "ADOPT UNFINISHED: `llm` was starting flotilla's instance (start, interrupted"
        ),
        "{}",
        st.stdout
    );
    let done = w.run(&["adopt", "llm", "--resume"]);
    assert_eq!(done.code, 0, "{}", both(&done));
    assert!(done.stdout.contains("adopted"), "{}", both(&done));
    assert_eq!(w.record().unwrap()["phase"], "adopted");
    let llm = w.llm();
    assert_eq!(llm["health"], "healthy", "{llm:#}");
    assert_eq!(
        others(&w.marker, prior.pid()),
        ours,
        "the instance started before the kill is the one adopted: no second copy"
    );
}

#[test]
fn a_start_that_fails_rolls_back_by_itself_to_the_prior_command_line() {
    let w = World::new("auto-rollback");
    let (port, chat_port) = (free_port(), free_port());
    let prior = w.hand(port, &[]);
    w.inventory(&testkit(), port, &[], "2s", chat_port);
    // Its start environment names a variable the adopt does not have: the start fails.
    let toml = std::fs::read_to_string(w.ws.path().join("flotilla.toml")).unwrap();
    w.ws.write(
        "flotilla.toml",
        &toml.replacen(
            "stop = {",
            "env = { TOKEN = \"${env.FLOTILLA_ADOPT_TEST_UNSET}\" }\nstop = {",
            1,
        ),
    );
    let run = w.run(&["adopt", "llm", "--yes"]);
    assert_eq!(run.code, 1, "{}", both(&run));
    assert!(
        run.stderr.contains("rolled back:") && run.stderr.contains("the start failed"),
        "{}",
        both(&run)
    );
    assert!(!alive(prior.pid()), "the prior owner was stopped first");
    let restored = others(&w.marker, prior.pid());
    assert_eq!(restored.len(), 1, "{restored:?}");
    assert_eq!(cmdline(restored[0]), prior.argv);
    assert!(healthy(port), "the restored service answers");
    let rec = w.record().unwrap();
    assert_eq!(rec["phase"], "rolled-back", "{rec:#}");
    let st = w.run(&["status"]);
    assert!(!st.stdout.contains("ADOPT UNFINISHED"), "{}", st.stdout);
}
