//! `flotilla agent run --inventory FILE` as a real process, driving real stand-in
//! services: it starts the inventory's components, applies an edit by restarting just
//! what changed, stops what was removed, keeps the last good state over an invalid
//! edit, restarts nothing when it restarts itself; supervises by `restart` policy
//! (a SIGKILLed component comes back, journaled; one stopped by hand is drift and
//! stays stopped; a crash loop is given up on); reports drift of identity files; and
//! holds no listening socket. `flotilla agent unit` prints a unit that runs this
//! binary.

mod common;

use common::Workspace;
use flotilla_testkit::{alive, free_port, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);

/// A running `flotilla agent run` whose standard error goes to a file.
struct AgentProc {
    child: Child,
    log: PathBuf,
}

impl AgentProc {
    fn start(ws: &Workspace) -> AgentProc {
        let n = std::fs::read_dir(ws.path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("agent-")
            })
            .count();
        let log = ws.path().join(format!("agent-{n}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args([
                "agent",
                "run",
                "--inventory",
                "flotilla.toml",
                "--poll",
                "100ms",
                "--check-every",
                "100ms",
                "--report-every",
                "300ms",
                "--timeout",
                "20s",
            ])
            .current_dir(ws.path())
            .env_remove("FLOTILLA_FILE")
            .env("FLOTILLA_STATE_DIR", ws.path().join(".flotilla-state"))
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start flotilla agent run");
        AgentProc { child, log }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then waits for it to exit.
    fn stop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let exited = wait_until(DEADLINE, || matches!(self.child.try_wait(), Ok(Some(_))));
        assert!(exited, "the agent did not stop on SIGTERM:\n{}", self.log());
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Kills the process group of every `*.pid` file's process in the workspace when
/// dropped (components lead their own groups).
struct KillComponents(PathBuf);

impl Drop for KillComponents {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pid") {
                if let Some(pid) = read_pid(&p) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

fn read_pid(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn pid(ws: &Workspace, name: &str) -> Option<u32> {
    read_pid(&ws.path().join(format!("{name}.pid")))
}

/// The agent's last report (`<state>/agent/status.json`).
fn report(ws: &Workspace) -> serde_json::Value {
    std::fs::read_to_string(ws.path().join(".flotilla-state/agent/status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn component(report: &serde_json::Value, name: &str) -> serde_json::Value {
    report["status"]["components"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or(serde_json::Value::Null)
}

/// Waits for `cond`, failing with the agent's log and last report when the deadline
/// passes.
fn wait_for(ws: &Workspace, agent: &AgentProc, what: &str, cond: impl FnMut() -> bool) {
    if !wait_until(DEADLINE, cond) {
        panic!(
            "timed out waiting for {what}\nagent log:\n{}\nlast report:\n{:#}",
            agent.log(),
            report(ws)
        );
    }
}

/// Runs `flotilla ARGS` in the workspace, again while the agent holds the lifecycle
/// lock, until it succeeds.
fn run_ok(ws: &Workspace, args: &[&str]) -> common::Run {
    let mut last = None;
    let ok = wait_until(DEADLINE, || {
        let r = ws.run(args);
        let done = r.code == 0;
        last = Some(r);
        done
    });
    let r = last.unwrap();
    assert!(ok, "flotilla {args:?}: {}\n{}", r.stdout, r.stderr);
    r
}

fn operations(ws: &Workspace) -> Vec<serde_json::Value> {
    let r = ws.run(&["operations", "--json", "--limit", "500"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.json().as_array().cloned().unwrap_or_default()
}

/// A component line: the stand-in service writing `<name>.pid`.
fn service(name: &str, extra: &str) -> String {
    let kit = flotilla_testkit::binary();
    format!(
        "[components.{name}]\ncommand = [{kit:?}, \"--pid-file\", \"{name}.pid\"{extra}]\nstop = {{ grace_period = \"2s\" }}\n"
    )
}

#[test]
fn converges_applies_edits_and_removals_and_restarts_nothing_when_restarted() {
    let ws = Workspace::new();
    let _kill = KillComponents(ws.path().to_path_buf());
    let inventory = |b_arg: &str, with_c: bool| {
        let mut t = service("a", "");
        t.push_str(&service("b", &format!(", \"--exec-name\", \"{b_arg}\"")));
        t.push_str("depends_on = [\"a\"]\n");
        if with_c {
            t.push_str(&service("c", ""));
        }
        ws.write("flotilla.toml", &t);
    };
    inventory("v1", true);
    let mut agent = AgentProc::start(&ws);
    let up = |names: &[&str]| {
        let r = report(&ws);
        names.iter().all(|n| {
            component(&r, n)["lifecycle"] == "running"
                && pid(&ws, n).is_some_and(alive)
                && component(&r, n)["runtime_identity"]["measured"]["pid"]
                    == serde_json::json!(pid(&ws, n))
        })
    };
    wait_for(&ws, &agent, "a, b and c to run", || up(&["a", "b", "c"]));
    let r = report(&ws);
    assert!(
        r["revision"].as_str().unwrap().starts_with("sha256:"),
        "{r:#}"
    );
    assert_eq!(r["drift"], serde_json::json!([]), "{r:#}");
    let (a1, b1, c1) = (
        pid(&ws, "a").unwrap(),
        pid(&ws, "b").unwrap(),
        pid(&ws, "c").unwrap(),
    );
    let ops = operations(&ws);
    assert!(
        ops.iter().all(|o| o["command_line"]
            .as_str()
            .unwrap()
            .starts_with("flotilla agent: apply sha256:")),
        "every operation is the agent's, journaled: {ops:#?}"
    );

    // One argument of b changes: b alone restarts.
    inventory("v2", true);
    wait_for(&ws, &agent, "b to restart", || {
        pid(&ws, "b").is_some_and(|p| p != b1 && alive(p)) && up(&["b"])
    });
    assert_eq!(pid(&ws, "a"), Some(a1), "a did not change");
    assert_eq!(pid(&ws, "c"), Some(c1), "c did not change");
    assert!(alive(a1) && alive(c1) && !alive(b1));

    // An invalid edit is reported; the last good state is kept.
    ws.write("flotilla.toml", "[components.a]\ncommand = 3\n");
    wait_for(&ws, &agent, "the invalid edit to be reported", || {
        report(&ws)["events"]
            .as_array()
            .is_some_and(|e| e.iter().any(|e| e.as_str().unwrap().contains("is invalid")))
    });
    assert!(
        agent.log().contains("error"),
        "diagnostics in the log: {}",
        agent.log()
    );

    // c is removed: c stops, the others stay.
    inventory("v2", false);
    wait_for(&ws, &agent, "c to stop", || !alive(c1));
    let b2 = pid(&ws, "b").unwrap();
    wait_for(&ws, &agent, "a report without c", || {
        let r = report(&ws);
        component(&r, "c").is_null() && up(&["a", "b"])
    });
    assert_eq!((pid(&ws, "a"), pid(&ws, "b")), (Some(a1), Some(b2)));
    let ops = operations(&ws);
    assert!(
        ops.iter().any(|o| o["verb"] == "stop"
            && o["target"] == "c"
            && o["outcome"] == "succeeded"
            && o["command_line"].as_str().unwrap().contains("(removed)")),
        "{ops:#?}"
    );
    let applied: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(ws.path().join(".flotilla-state/agent/snapshot.json")).unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = applied["snapshot"]["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["a", "b"],
        "the applied snapshot is kept: {applied:#}"
    );

    // The agent stops (its components keep running) and starts again with the same
    // inventory: nothing restarts, nothing is journaled.
    let before = operations(&ws).len();
    agent.stop();
    assert!(alive(a1) && alive(b2), "components outlive the agent");
    let again = AgentProc::start(&ws);
    wait_for(&ws, &again, "the restarted agent's report", || {
        again.log().contains("status: ") && up(&["a", "b"])
    });
    assert_eq!((pid(&ws, "a"), pid(&ws, "b")), (Some(a1), Some(b2)));
    assert_eq!(operations(&ws).len(), before, "{:#?}", operations(&ws));
}

#[test]
fn supervises_by_restart_policy_and_reports_drift_without_reverting_it() {
    let ws = Workspace::new();
    let _kill = KillComponents(ws.path().to_path_buf());
    ws.write("conf.txt", "model: small\n");
    let mut t = service("killed", "");
    t.push_str("restart = { policy = \"on-failure\", backoff = \"100ms\" }\n");
    t.push_str(&service("byhand", ""));
    t.push_str("restart = { policy = \"always\", backoff = \"100ms\" }\n");
    t.push_str(&service("looping", ", \"--crash-after\", \"700\""));
    t.push_str("restart = { policy = \"on-failure\", backoff = \"50ms\", max_restarts = 2 }\n");
    t.push_str(&service(
        "clean",
        ", \"--crash-after\", \"700\", \"--exit-code\", \"0\"",
    ));
    t.push_str("restart = { policy = \"on-failure\", backoff = \"50ms\" }\n");
    t.push_str(&service("configured", ""));
    t.push_str("identity_files = [\"conf.txt\"]\n");
    t.push_str(&service("patient", ""));
    t.push_str("restart = { policy = \"always\", backoff = \"1h\", max_backoff = \"1h\" }\n");
    ws.write("flotilla.toml", &t);
    let agent = AgentProc::start(&ws);
    let running = |n: &str| component(&report(&ws), n)["lifecycle"] == "running";
    wait_for(
        &ws,
        &agent,
        "killed, byhand, configured and patient to run",
        || {
            ["killed", "byhand", "configured", "patient"]
                .iter()
                .all(|n| running(n))
        },
    );

    // While a restart waits out its backoff, every `status` on the host says so.
    let p1 = pid(&ws, "patient").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p1 as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let local_status = |name: &str| ws.run(&["status", name]).stdout;
    wait_for(&ws, &agent, "patient's pending restart in status", || {
        let out = local_status("patient");
        out.contains("restarting in 59m") && out.contains("(attempt 1 of ")
    });
    let out = local_status("patient");
    assert!(
        out.contains(&format!("after pid {p1} killed by SIGKILL")),
        "{out}"
    );

    // SIGKILL: restarted with a new pid, journaled as the agent's restart.
    let k1 = pid(&ws, "killed").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(k1 as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for(&ws, &agent, "killed to come back", || {
        pid(&ws, "killed").is_some_and(|p| p != k1 && alive(p)) && running("killed")
    });
    let ops = operations(&ws);
    let restart = ops
        .iter()
        .find(|o| {
            o["target"] == "killed"
                && o["command_line"]
                    .as_str()
                    .unwrap()
                    .contains("supervise: restart killed")
        })
        .unwrap_or_else(|| panic!("no restart journaled: {ops:#?}"));
    assert_eq!(restart["outcome"], "succeeded", "{restart:#}");
    // `ps` counts the agent's restarts (a field, from the journal).
    let ps = ws.run(&["ps", "killed", "--json"]);
    assert_eq!(ps.code, 0, "{}", ps.stderr);
    let row = ps.json()["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "killed")
        .cloned()
        .unwrap_or_else(|| panic!("{}", ps.stdout));
    assert_eq!(row["restarts"], 1, "{row:#}");
    assert!(
        restart["command_line"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {k1} killed by SIGKILL")),
        "{restart:#}"
    );

    // Stopped by hand: drift, and not restarted (its policy is `always`).
    let h1 = pid(&ws, "byhand").unwrap();
    run_ok(&ws, &["stop", "byhand"]);
    assert!(!alive(h1));
    wait_for(&ws, &agent, "byhand's drift", || {
        report(&ws)["drift"].as_array().is_some_and(|d| {
            d.iter()
                .any(|d| d["component"] == "byhand" && d["kind"] == "stopped-by-hand")
        })
    });
    let drift = report(&ws)["drift"].clone();
    assert!(
        drift.to_string().contains("stop byhand"),
        "evidence names the operation: {drift:#}"
    );
    // Several more checks later (each report is newer), it is still stopped.
    let seen = report(&ws)["status"]["observed_at_ms"].as_i64().unwrap();
    wait_for(&ws, &agent, "reports a second later", || {
        report(&ws)["status"]["observed_at_ms"].as_i64().unwrap() > seen + 1000
    });
    assert_eq!(component(&report(&ws), "byhand")["lifecycle"], "stopped");
    assert_eq!(pid(&ws, "byhand"), Some(h1), "never started again");

    // A crash loop is given up on after max_restarts.
    wait_for(&ws, &agent, "looping to be given up on", || {
        let c = component(&report(&ws), "looping");
        c["condition"] == "attention" && c.to_string().contains("crash loop: 2 restarts in")
    });
    let restarts = operations(&ws)
        .iter()
        .filter(|o| {
            o["command_line"]
                .as_str()
                .unwrap()
                .contains("supervise: restart looping")
        })
        .count();
    assert_eq!(restarts, 2, "{:#?}", operations(&ws));
    // Not only in the agent's report: `status` on the host says it too.
    let out = ws.run(&["status", "looping", "--json"]);
    let c = &out.json()["components"][0];
    assert_eq!(c["condition"], "attention", "{c:#}");
    assert!(c.to_string().contains("crash loop: 2 restarts in"), "{c:#}");

    // A clean exit under on-failure is left stopped.
    wait_for(&ws, &agent, "clean's exit", || {
        report(&ws)["events"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e.as_str().unwrap().contains("`clean` exited cleanly"))
        })
    });
    assert!(!operations(&ws).iter().any(|o| o["command_line"]
        .as_str()
        .unwrap()
        .contains("restart clean")));
    // Started by the CLI (so not the agent's child), its clean exit is known from
    // the marker its log writer wrote: left stopped too.
    run_ok(&ws, &["start", "clean"]);
    wait_for(&ws, &agent, "clean's second clean exit", || {
        let logs = ws.run(&["logs", "clean", "-n", "1000"]).stdout;
        logs.matches("ended: exit status 0").count() >= 2
    });
    let seen = report(&ws)["status"]["observed_at_ms"].as_i64().unwrap();
    wait_for(&ws, &agent, "reports a second later", || {
        report(&ws)["status"]["observed_at_ms"].as_i64().unwrap() > seen + 1000
    });
    assert!(
        !operations(&ws).iter().any(|o| o["command_line"]
            .as_str()
            .unwrap()
            .contains("restart clean")),
        "{:#?}",
        operations(&ws)
    );

    // An identity file edited by hand: drift (runtime), not restarted.
    let c1 = pid(&ws, "configured").unwrap();
    ws.write("conf.txt", "model: large\n");
    wait_for(&ws, &agent, "configured's drift", || {
        report(&ws)["drift"].as_array().is_some_and(|d| {
            d.iter().any(|d| {
                d["component"] == "configured"
                    && d["kind"] == "runtime"
                    && d.to_string().contains("conf.txt")
            })
        })
    });
    assert_eq!(pid(&ws, "configured"), Some(c1));
    assert!(alive(c1));
}

/// Socket inodes of `pid`'s open file descriptors.
#[test]
fn a_supervised_restart_never_starts_a_dependency_its_policy_left_stopped() {
    let ws = Workspace::new();
    let _kill = KillComponents(ws.path().to_path_buf());
    // llm exits cleanly (left stopped: on-failure); proxy depends on it and is killed.
    let mut t = service(
        "llm",
        ", \"--crash-after\", \"1500\", \"--exit-code\", \"0\"",
    );
    t.push_str("restart = { policy = \"on-failure\", backoff = \"50ms\" }\n");
    t.push_str(&service("proxy", ""));
    t.push_str(
        "depends_on = [\"llm\"]\nrestart = { policy = \"on-failure\", backoff = \"50ms\" }\n",
    );
    ws.write("flotilla.toml", &t);
    let mut agent = AgentProc::start(&ws);
    let events = || report(&ws)["events"].to_string();
    wait_for(&ws, &agent, "llm's clean exit to be left alone", || {
        events().contains("`llm` exited cleanly")
    });
    // Not down unexpectedly: done, as its policy says.
    let st = ws.run(&["status", "llm", "--json"]).json()["components"][0].clone();
    assert_eq!(st["condition"], "ok", "{st:#}");
    assert!(st.to_string().contains("exited cleanly"), "{st:#}");
    let llm = pid(&ws, "llm").unwrap();
    assert!(!alive(llm));
    let p1 = pid(&ws, "proxy").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(p1 as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_for(
        &ws,
        &agent,
        "the restart of proxy to be refused, saying why",
        || events().contains("would also start `llm`"),
    );
    assert_eq!(pid(&ws, "llm"), Some(llm), "llm was started again");
    assert!(!alive(llm));
    assert!(
        !operations(&ws).iter().any(|o| o["command_line"]
            .as_str()
            .unwrap()
            .contains("restart proxy")
            && o["outcome"] == "succeeded"),
        "{:#?}",
        operations(&ws)
    );
    // `status` says the restart is held and why, never a countdown to it; a second
    // later it still is, and no attempt was counted.
    let held = || ws.run(&["status", "proxy"]).stdout;
    wait_for(&ws, &agent, "proxy's held restart in status", || {
        held().contains("not restarted: it would also start `llm`, stopped")
    });
    let seen = report(&ws)["status"]["observed_at_ms"].as_i64().unwrap();
    wait_for(&ws, &agent, "reports a second later", || {
        report(&ws)["status"]["observed_at_ms"].as_i64().unwrap() > seen + 1000
    });
    let out = held();
    assert!(!out.contains("restarting in"), "{out}");
    assert!(out.contains("not restarted"), "{out}");
    // The agent restarted: llm's clean exit still stands (not started again).
    agent.stop();
    let agent = AgentProc::start(&ws);
    let seen = report(&ws)["status"]["observed_at_ms"]
        .as_i64()
        .unwrap_or(0);
    wait_for(&ws, &agent, "the new agent to report", || {
        report(&ws)["status"]["observed_at_ms"]
            .as_i64()
            .is_some_and(|t| t > seen + 1000)
    });
    assert_eq!(
        pid(&ws, "llm"),
        Some(llm),
        "llm was started again after the agent restarted:\n{}",
        agent.log()
    );
}

fn socket_inodes(pid: u32) -> Vec<u64> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// Inodes of listening TCP sockets and bound UDP sockets seen from `pid`'s network
/// namespace (`/proc/<pid>/net/{tcp,tcp6,udp,udp6}`).
fn listening_inodes(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for (table, state) in [("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() > 9 && f[3] == state {
                if let Ok(inode) = f[9].parse() {
                    out.push(inode);
                }
            }
        }
    }
    out
}

#[test]
fn holds_no_listening_socket_while_its_component_listens() {
    let ws = Workspace::new();
    let _kill = KillComponents(ws.path().to_path_buf());
    let port = free_port();
    ws.write(
        "flotilla.toml",
        &format!(
            "{}endpoints = {{ http = \"http://127.0.0.1:{port}\" }}\nreadiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"50ms\" }}\n",
            service("web", &format!(", \"--listen\", \"127.0.0.1:{port}\""))
        ),
    );
    let agent = AgentProc::start(&ws);
    wait_for(&ws, &agent, "web to run and be healthy", || {
        let c = component(&report(&ws), "web");
        c["lifecycle"] == "running" && c["health"] == "healthy"
    });
    let web = pid(&ws, "web").unwrap();
    // The method sees a listener: web's own socket is one.
    let listening = listening_inodes(agent.pid());
    assert!(
        socket_inodes(web).iter().any(|i| listening.contains(i)),
        "web listens on {port}"
    );
    // The agent, after it has started, probed and reported, holds none.
    let mine = socket_inodes(agent.pid());
    let held: Vec<&u64> = mine.iter().filter(|i| listening.contains(i)).collect();
    assert!(
        held.is_empty(),
        "the agent holds listening sockets {held:?}"
    );
    let ss = Command::new("ss").args(["-ltnupH"]).output();
    if let Ok(out) = ss {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !text.contains(&format!("pid={},", agent.pid())),
            "ss shows the agent listening:\n{text}"
        );
    }
}

#[test]
fn a_state_directory_the_agent_cannot_use_is_named() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", &service("web", ""));
    // A file where the agent's own directory should be.
    let state = ws.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(state.join("agent"), "").unwrap();
    let r = common::run_with_env(
        ws.path(),
        &["agent", "run", "--inventory", "flotilla.toml"],
        &[("FLOTILLA_STATE_DIR", state.to_str().unwrap())],
    );
    assert_eq!(r.code, 3, "{r:?}");
    assert!(
        r.stderr
            .contains(&state.join("agent").display().to_string()),
        "{}",
        r.stderr
    );
}

#[test]
fn one_agent_per_state_directory() {
    let ws = Workspace::new();
    let _kill = KillComponents(ws.path().to_path_buf());
    ws.write("flotilla.toml", &service("web", ""));
    let agent = AgentProc::start(&ws);
    wait_for(&ws, &agent, "web to run", || {
        component(&report(&ws), "web")["lifecycle"] == "running"
    });
    let second = ws.run(&["agent", "run", "--inventory", "flotilla.toml"]);
    assert_eq!(second.code, 1, "{second:?}");
    assert!(
        second
            .stderr
            .contains("another agent runs on this state directory")
            && second.stderr.contains(&format!("pid {}", agent.pid())),
        "{}",
        second.stderr
    );
}

#[test]
fn unit_runs_this_binary_with_the_absolute_inventory() {
    let ws = Workspace::new();
    ws.write("flotilla.toml", &service("a", ""));
    let r = ws.run(&["agent", "unit", "--inventory", "flotilla.toml"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let exe = std::fs::canonicalize(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    let inventory = std::fs::canonicalize(ws.path().join("flotilla.toml")).unwrap();
    let exec = r
        .stdout
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        exec.starts_with(&format!(
            "ExecStart={} agent run --inventory ",
            exe.display()
        )),
        "{exec}"
    );
    assert!(
        exec.contains(&inventory.display().to_string())
            || exec.contains(&ws.path().join("flotilla.toml").display().to_string()),
        "{exec}"
    );
    assert!(r.stdout.contains("KillMode=process\n"), "{}", r.stdout);
    // Root gets a system unit; anyone else a user unit.
    let wanted = if nix::unistd::Uid::effective().is_root() {
        "WantedBy=multi-user.target\n"
    } else {
        "WantedBy=default.target\n"
    };
    assert!(r.stdout.contains(wanted), "{}", r.stdout);
    // The state directory is always explicit (the CLI's own), PATH is the service
    // PATH after this binary's directory, never the invoking shell's, and the
    // install comment is the command that printed it.
    let state = ws.path().join(".flotilla-state");
    assert!(
        exec.contains(&format!("--state-dir {}", state.display())),
        "{exec}"
    );
    let path_line = format!(
        "Environment=PATH={}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n",
        exe.parent().unwrap().display()
    );
    assert!(r.stdout.contains(&path_line), "{}", r.stdout);
    assert!(
        r.stdout.contains("agent unit --inventory flotilla.toml > "),
        "{}",
        r.stdout
    );
    // Without --inventory, the current directory's inventory (as every verb).
    let here = ws.run(&["agent", "unit"]);
    assert_eq!(here.code, 0, "{}", here.stderr);
    assert!(
        here.stdout.contains("--inventory ") && here.stdout.contains("flotilla.toml"),
        "{}",
        here.stdout
    );
    // A system unit for another user.
    let r = ws.run(&["agent", "unit", "--user", "nobody"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("User=nobody\n") && r.stdout.contains("WantedBy=multi-user.target\n"),
        "{}",
        r.stdout
    );
    // With no state directory given, that user's, not the one of whoever printed it.
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["agent", "unit", "--user", "nobody"])
        .current_dir(ws.path())
        .env_remove("FLOTILLA_STATE_DIR")
        .env_remove("FLOTILLA_FILE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let home = nix::unistd::User::from_name("nobody").unwrap().unwrap().dir;
    assert!(
        text.contains(&format!(
            "--state-dir {}",
            home.join(".local/state/flotilla").display()
        )),
        "{text}"
    );
    let r = ws.run(&["agent", "unit", "--user", "no-such-user-flotilla"]);
    assert_eq!(r.code, 2, "{}", r.stderr);

    let r = ws.run(&["agent", "unit", "--inventory", "flotilla.toml", "--launchd"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for key in [
        "<key>RunAtLoad</key>",
        "<key>KeepAlive</key>",
        "dev.flotilla.agent",
    ] {
        assert!(r.stdout.contains(key), "{key}: {}", r.stdout);
    }

    // Without an inventory anywhere it needs an authority it has joined.
    let empty = ws.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let r = common::run_with_env(
        &empty,
        &["agent", "unit"],
        &[("FLOTILLA_STATE_DIR", state.to_str().unwrap())],
    );
    assert_eq!(r.code, 2, "{}", r.stdout);
    assert!(r.stderr.contains("agent join"), "{}", r.stderr);
    // An invalid inventory is refused before anything is printed.
    ws.write("bad.toml", "[components.a]\ncommand = 3\n");
    let r = ws.run(&["agent", "unit", "--inventory", "bad.toml"]);
    assert_eq!(r.code, 2);
    assert!(r.stdout.is_empty());
}
