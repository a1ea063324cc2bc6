//! The real binary operating real processes (`flotilla-testkit` services on 127.0.0.1):
//! dependency order and parallel waves, refusals, reverse shutdown, cleanup after a
//! failed start, idempotence, SIGKILL after the grace period, pid reuse, the lock,
//! kill -9 of the CLI, port conflicts, readiness timeouts, and a status that tells the
//! truth after each of them.

mod common;

use common::Workspace;
use flotilla_testkit::{free_port, wait_until};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A temp dir with an inventory of testkit services, its own state dir, and a guard
/// that kills every process any service wrote into its pid file.
struct Fleet {
    ws: Workspace,
    state: PathBuf,
    ports: BTreeMap<String, u16>,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.ws.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let p = entry.path();
            if p.extension().is_some_and(|e| e == "pid") {
                if let Some(pid) = std::fs::read_to_string(&p)
                    .ok()
                    .and_then(|s| s.trim().parse::<i32>().ok())
                {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

/// One testkit component: name, extra flags, dependencies.
struct Svc<'a> {
    name: &'a str,
    flags: &'a [&'a str],
    deps: &'a [&'a str],
    extra: &'a str,
}

fn svc<'a>(name: &'a str, deps: &'a [&'a str]) -> Svc<'a> {
    Svc {
        name,
        flags: &[],
        deps,
        extra: "",
    }
}

impl Fleet {
    fn new(services: &[Svc<'_>], stacks: &str) -> Fleet {
        let ws = Workspace::new();
        let state = ws.path().join("state");
        let bin = flotilla_testkit::binary();
        let mut ports = BTreeMap::new();
        let mut toml = String::new();
        for s in services {
            let port = free_port();
            ports.insert(s.name.to_string(), port);
            let pid_file = ws.path().join(format!("{}.pid", s.name));
            let ready_file = ws.path().join(format!("{}.ready", s.name));
            let mut args = vec![
                format!("\"{}\"", bin.display()),
                "\"--listen\"".into(),
                format!("\"127.0.0.1:{port}\""),
                "\"--pid-file\"".into(),
                format!("\"{}\"", pid_file.display()),
                "\"--ready-file\"".into(),
                format!("\"{}\"", ready_file.display()),
            ];
            args.extend(s.flags.iter().map(|f| format!("\"{f}\"")));
            let deps: Vec<String> = s.deps.iter().map(|d| format!("\"{d}\"")).collect();
            toml.push_str(&format!(
                "[components.{}]\ncommand = [{}]\nendpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/health\" }}, period = \"100ms\" }}\n\
                 stop = {{ grace_period = \"2s\" }}\ndepends_on = [{}]\n{}\n",
                s.name,
                args.join(", "),
                deps.join(", "),
                s.extra
            ));
        }
        toml.push_str(stacks);
        ws.write("flotilla.toml", &toml);
        Fleet { ws, state, ports }
    }

    /// This inventory's project directory in the state directory (the project is the
    /// inventory's directory name).
    fn project_dir(&self) -> PathBuf {
        common::project_dir(&self.state, self.ws.path())
    }

    fn run(&self, args: &[&str]) -> common::Run {
        common::run_with_env(
            self.ws.path(),
            args,
            &[("FLOTILLA_STATE_DIR", self.state.to_str().unwrap())],
        )
    }

    fn pid(&self, name: &str) -> Option<i32> {
        std::fs::read_to_string(self.ws.path().join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// When the service began listening (ns since the epoch), from its ready file.
    fn listened_at(&self, name: &str) -> u128 {
        std::fs::read_to_string(self.ws.path().join(format!("{name}.ready")))
            .expect("ready file")
            .trim()
            .parse()
            .expect("timestamp")
    }

    fn status_json(&self) -> serde_json::Value {
        self.run(&["status", "--json"]).json()
    }

    fn status_of(&self, name: &str) -> serde_json::Value {
        let s = self.status_json();
        s["components"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .expect(name)
    }
}

/// [`flotilla_testkit::alive`] for a pid as `i32`.
fn alive(pid: i32) -> bool {
    flotilla_testkit::alive(pid as u32)
}

const DEADLINE: Duration = Duration::from_secs(15);

#[test]
fn up_starts_in_dependency_order_with_parallel_waves_and_down_reverses_it() {
    let f = Fleet::new(
        &[
            Svc {
                name: "a1",
                flags: &["--listen-after", "300"],
                deps: &[],
                extra: "",
            },
            Svc {
                name: "a2",
                flags: &["--listen-after", "300"],
                deps: &[],
                extra: "",
            },
            svc("b", &["a1", "a2"]),
            svc("c", &["b"]),
        ],
        "[stacks.all]\ncomponents = [\"c\"]\n",
    );
    let run = f.run(&["up", "all"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stdout.contains("plan: flotilla start all"),
        "the plan is printed first:\n{}",
        run.stdout
    );
    let (a1, a2, b, c) = (
        f.listened_at("a1"),
        f.listened_at("a2"),
        f.listened_at("b"),
        f.listened_at("c"),
    );
    // a1 and a2 are one wave: started together, each taking 300 ms to listen.
    let gap = a1.abs_diff(a2);
    assert!(
        gap < 250_000_000,
        "a1 and a2 did not start in parallel: {gap} ns apart"
    );
    assert!(
        b > a1.max(a2),
        "b listened before its dependencies were ready"
    );
    assert!(c > b, "c listened before b was ready");
    let s = f.status_json();
    for comp in s["components"].as_array().unwrap() {
        assert_eq!(comp["lifecycle"], "running", "{comp}");
        assert_eq!(comp["health"], "healthy", "{comp}");
        assert_eq!(comp["desired"], "running", "{comp}");
    }
    assert_eq!(f.run(&["status"]).code, 0);

    // Idempotent: a second up changes nothing.
    let pids: Vec<i32> = ["a1", "a2", "b", "c"]
        .iter()
        .map(|n| f.pid(n).unwrap())
        .collect();
    let again = f.run(&["up", "all"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stdout.contains("nothing to do"), "{}", again.stdout);
    let pids2: Vec<i32> = ["a1", "a2", "b", "c"]
        .iter()
        .map(|n| f.pid(n).unwrap())
        .collect();
    assert_eq!(pids, pids2);

    // Down stops in reverse order and leaves nothing behind.
    let down = f.run(&["down", "all"]);
    assert_eq!(down.code, 0, "{}\n{}", down.stdout, down.stderr);
    let order: Vec<usize> = ["stop  c", "stop  b", "stop  a1"]
        .iter()
        .map(|s| down.stdout.find(s).expect(s))
        .collect();
    assert!(
        order[0] < order[1] && order[1] < order[2],
        "{}",
        down.stdout
    );
    for pid in pids {
        assert!(!alive(pid), "pid {pid} survived down");
    }
    let s = f.status_json();
    for comp in s["components"].as_array().unwrap() {
        assert_eq!(comp["lifecycle"], "stopped", "{comp}");
        assert_eq!(comp["condition"], "ok", "{comp}");
    }
    let again = f.run(&["down", "all"]);
    assert_eq!(again.code, 0, "{}", again.stderr);
}

#[test]
fn stop_is_refused_while_dependents_run_and_cascade_stops_them_first() {
    let f = Fleet::new(&[svc("db", &[]), svc("api", &["db"])], "");
    assert_eq!(f.run(&["start", "api"]).code, 0);
    let refused = f.run(&["stop", "db"]);
    assert_eq!(refused.code, 1, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("`db` has running dependents: api"),
        "{}",
        refused.stderr
    );
    assert!(alive(f.pid("db").unwrap()));
    // The refusal is journaled, with its reason.
    let ops = f.run(&["operations", "--json"]).json();
    let last = &ops.as_array().unwrap()[0];
    assert_eq!(last["outcome"], "refused", "{ops:#}");
    assert_eq!(last["verb"], "stop", "{ops:#}");
    assert!(
        last["error"]
            .as_str()
            .unwrap()
            .contains("running dependents: api"),
        "{ops:#}"
    );
    let cascade = f.run(&["stop", "db", "--cascade"]);
    assert_eq!(cascade.code, 0, "{}", cascade.stderr);
    assert!(!alive(f.pid("db").unwrap()) && !alive(f.pid("api").unwrap()));
}

#[test]
fn a_failed_start_cleans_up_only_what_it_started() {
    let f = Fleet::new(
        &[
            svc("base", &[]),
            svc("fresh", &[]),
            Svc {
                name: "broken",
                flags: &["--listen-after", "5000", "--crash-after", "300"],
                deps: &["base", "fresh"],
                extra: "",
            },
        ],
        "",
    );
    // `base` runs before the failing operation; `fresh` is started by it.
    assert_eq!(f.run(&["start", "base"]).code, 0);
    let base_pid = f.pid("base").unwrap();
    let run = f.run(&["start", "broken", "--timeout", "10s"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("failed at `broken`"), "{}", run.stderr);
    assert!(
        run.stderr.contains("exited"),
        "the exit status is reported:\n{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("STARTED pid="),
        "the log tail is shown:\n{}",
        run.stderr
    );
    assert!(
        alive(base_pid),
        "a component that ran before was stopped by the cleanup"
    );
    assert!(
        !alive(f.pid("fresh").unwrap()),
        "what the failed operation started was not cleaned up"
    );
    let ops = f.run(&["operations", "--json"]).json();
    assert_eq!(ops[0]["outcome"], "rolled-back");
}

#[test]
fn readiness_timeout_reports_evidence_and_cleans_up() {
    let f = Fleet::new(
        &[Svc {
            name: "slow",
            flags: &["--status-before-ready", "503", "--ready-after", "60000"],
            deps: &[],
            extra: "",
        }],
        "",
    );
    let run = f.run(&["start", "slow", "--timeout", "1500ms"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("503"),
        "the last probe evidence is shown:\n{}",
        run.stderr
    );
    assert!(!alive(f.pid("slow").unwrap()));
}

#[test]
fn sigterm_ignoring_service_is_killed_after_grace_and_its_child_too() {
    let f = Fleet::new(
        &[Svc {
            name: "stubborn",
            flags: &[
                "--ignore-sigterm",
                "--spawn-child",
                "--child-ignores-sigterm",
            ],
            deps: &[],
            extra: "",
        }],
        "",
    );
    assert_eq!(f.run(&["start", "stubborn"]).code, 0);
    let pid = f.pid("stubborn").unwrap();
    let log = f.project_dir().join("logs/stubborn.log");
    assert!(wait_until(DEADLINE, || std::fs::read_to_string(&log)
        .is_ok_and(|l| l.contains("CHILD "))));
    let text = std::fs::read_to_string(&log).unwrap();
    // Lines are stamped by the log writer: `<time> stdout F CHILD 42`.
    let child: i32 = text
        .lines()
        .find_map(|l| l.split_once(" F CHILD ").map(|(_, pid)| pid))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(child));
    let stop = f.run(&["stop", "stubborn"]);
    assert_eq!(stop.code, 0, "{}", stop.stderr);
    assert!(
        stop.stderr.contains("SIGKILL") || stop.stdout.contains("SIGKILL"),
        "{}\n{}",
        stop.stdout,
        stop.stderr
    );
    assert!(
        !alive(pid) && !alive(child),
        "a process of the group survived"
    );
}

#[test]
fn port_conflict_is_refused_and_reported_not_adopted() {
    let f = Fleet::new(&[svc("web", &[])], "");
    let port = f.ports["web"];
    let bin = flotilla_testkit::binary();
    let squatter = Killed(
        Command::new(bin)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_until(DEADLINE, || std::net::TcpStream::connect((
        "127.0.0.1",
        port
    ))
    .is_ok()));
    // Not running: a process that is not this component holds its port.
    let status = f.status_of("web");
    assert_eq!(status["condition"], "attention", "{status}");
    assert_eq!(status["lifecycle"], "stopped", "{status}");
    let evidence = status["evidence"].to_string();
    assert!(
        evidence.contains(&format!("port {port} is held by pid {}", squatter.0.id()))
            && evidence.contains("not by this component"),
        "{status}"
    );
    let run = f.run(&["start", "web"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("port {port}")),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(&format!("pid {}", squatter.0.id())),
        "{}",
        run.stderr
    );
    assert!(
        alive(squatter.0.id() as i32),
        "the foreign process was touched"
    );
}

/// A child process killed when dropped (even if the test fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn killed_component_is_down_unexpectedly_then_restart_recovers() {
    let f = Fleet::new(&[svc("llm", &[])], "");
    assert_eq!(f.run(&["start", "llm"]).code, 0);
    let pid = f.pid("llm").unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(wait_until(DEADLINE, || !alive(pid)));
    let st = f.status_of("llm");
    assert_eq!(st["condition"], "down-unexpectedly", "{st}");
    assert_ne!(st["lifecycle"], "stopped", "{st}");
    assert_eq!(f.run(&["status"]).code, 1);
    let restart = f.run(&["restart", "llm"]);
    assert_eq!(restart.code, 0, "{}", restart.stderr);
    let st = f.status_of("llm");
    assert_eq!(
        (st["lifecycle"].as_str(), st["condition"].as_str()),
        (Some("running"), Some("ok")),
        "{st}"
    );
}

#[test]
fn running_but_unready_is_unhealthy_and_config_change_is_drift() {
    let f = Fleet::new(&[svc("api", &[])], "");
    assert_eq!(f.run(&["start", "api"]).code, 0);
    // Point its readiness probe at a path the service answers with 200 anyway, but
    // make the service answer 500 by changing the probe's expected status.
    let toml = std::fs::read_to_string(f.ws.path().join("flotilla.toml")).unwrap();
    f.ws.write(
        "flotilla.toml",
        &toml.replace("path = \"/health\" }", "path = \"/health\", status = 404 }"),
    );
    let st = f.status_of("api");
    assert_eq!(
        (st["lifecycle"].as_str(), st["health"].as_str()),
        (Some("running"), Some("unhealthy")),
        "{st}"
    );
    // A changed command is config drift.
    f.ws.write(
        "flotilla.toml",
        &toml.replace("\"--pid-file\"", "\"--exec-name\", \"v2\", \"--pid-file\""),
    );
    let st = f.status_of("api");
    assert_eq!(st["condition"], "drift", "{st}");
    // `start --no-recreate` leaves it running, and says how to apply the new config
    // (without it, `start` restarts it: tests/recreate.rs).
    let run = f.run(&["start", "api", "--no-recreate"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("runs an older config (drift): `flotilla restart api`"),
        "{}",
        run.stderr
    );
}

#[test]
fn replaced_binary_is_stale_runtime() {
    let ws_bin = tempfile::tempdir().unwrap();
    let copy = ws_bin.path().join("svc");
    std::fs::copy(flotilla_testkit::binary(), &copy).unwrap();
    let f = Fleet::new(&[svc("svc", &[])], "");
    let toml = std::fs::read_to_string(f.ws.path().join("flotilla.toml")).unwrap();
    f.ws.write(
        "flotilla.toml",
        &toml.replace(
            &flotilla_testkit::binary().display().to_string(),
            &copy.display().to_string(),
        ),
    );
    assert_eq!(f.run(&["start", "svc"]).code, 0);
    // Replace the file on disk (as an upgrade would): a new inode with other bytes.
    let tmp = ws_bin.path().join("svc.new");
    let mut bytes = std::fs::read(&copy).unwrap();
    bytes.extend_from_slice(b"\0upgrade");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, &copy).unwrap();
    let st = f.status_of("svc");
    assert_eq!(st["condition"], "stale-runtime", "{st}");
}

#[test]
fn second_mutating_invocation_fails_at_once_naming_the_holder() {
    let f = Fleet::new(
        &[Svc {
            name: "slow",
            flags: &["--status-before-ready", "503", "--ready-after", "3000"],
            deps: &[],
            extra: "",
        }],
        "",
    );
    let mut first = f.spawn(&["start", "slow"]);
    let lock = f.project_dir().join("run/lifecycle.lock");
    assert!(wait_until(DEADLINE, || std::fs::read_to_string(&lock)
        .is_ok_and(|t| t.contains("\"pid\""))));
    let second = f.run(&["stop", "slow"]);
    assert_eq!(second.code, 1, "{}", second.stderr);
    assert!(
        second.stderr.contains(&format!("pid {}", first.id())),
        "{}",
        second.stderr
    );
    assert!(
        second.stderr.contains("flotilla start slow") || second.stderr.contains("start slow"),
        "{}",
        second.stderr
    );
    // Read-only verbs take no lock.
    assert_ne!(f.run(&["status"]).code, 2);
    assert!(first.wait().unwrap().success());
}

#[test]
fn cli_killed_mid_up_then_rerun_starts_no_duplicates() {
    let f = Fleet::new(
        &[
            svc("fast", &[]),
            Svc {
                name: "slow",
                flags: &["--status-before-ready", "503", "--ready-after", "1500"],
                deps: &["fast"],
                extra: "",
            },
        ],
        "[stacks.s]\ncomponents = [\"slow\"]\n",
    );
    let mut cli = f.spawn(&["up", "s"]);
    // Wait until `slow` has been started (its pid file exists), then kill -9 the CLI.
    assert!(wait_until(DEADLINE, || f.pid("slow").is_some()));
    cli.kill().unwrap();
    cli.wait().unwrap();
    let st = f.run(&["status"]);
    assert!(st.stdout.contains("interrupted"), "{}", st.stdout);
    let (fast, slow) = (f.pid("fast").unwrap(), f.pid("slow").unwrap());
    let rerun = f.run(&["up", "s"]);
    assert_eq!(rerun.code, 0, "{}\n{}", rerun.stdout, rerun.stderr);
    assert_eq!(
        (f.pid("fast").unwrap(), f.pid("slow").unwrap()),
        (fast, slow),
        "a component was started twice"
    );
    assert!(alive(fast) && alive(slow));
}

#[test]
fn up_and_down_without_a_stack_take_every_stack() {
    let f = Fleet::new(
        &[svc("a", &[]), svc("b", &["a"]), svc("c", &[])],
        "[stacks.one]\ncomponents = [\"b\"]\n[stacks.two]\ncomponents = [\"c\"]\n",
    );
    let up = f.run(&["up"]);
    assert_eq!(up.code, 0, "{}\n{}", up.stdout, up.stderr);
    assert!(
        up.stderr.contains("==> up one") && up.stderr.contains("==> up two"),
        "{}",
        up.stderr
    );
    let pids: Vec<i32> = ["a", "b", "c"].iter().map(|n| f.pid(n).unwrap()).collect();
    assert!(pids.iter().all(|&p| alive(p)));
    let down = f.run(&["down"]);
    assert_eq!(down.code, 0, "{}\n{}", down.stdout, down.stderr);
    assert!(
        wait_until(DEADLINE, || pids.iter().all(|&p| !alive(p))),
        "{}\n{}",
        down.stdout,
        down.stderr
    );
}

#[test]
fn after_a_port_change_status_and_ps_describe_what_runs_until_it_is_restarted() {
    let f = Fleet::new(&[svc("llm", &[])], "");
    assert_eq!(f.run(&["start", "llm"]).code, 0);
    let old = f.ports["llm"];
    let new = flotilla_testkit::free_port();
    // The inventory now says another port; the running process still serves the old.
    let toml = std::fs::read_to_string(f.ws.path().join("flotilla.toml")).unwrap();
    f.ws.write(
        "flotilla.toml",
        &toml.replace(&format!("127.0.0.1:{old}"), &format!("127.0.0.1:{new}")),
    );
    let st = f.status_of("llm");
    assert_eq!(st["lifecycle"], "running", "{st}");
    assert_eq!(st["condition"], "drift", "{st}");
    assert_eq!(st["health"], "healthy", "probed where it runs: {st}");
    let evidence = st["evidence"].to_string();
    assert!(
        evidence.contains(&format!("restart pending (port {old} → {new})")),
        "{st}"
    );
    let ps = f.run(&["ps", "llm", "--json"]);
    let ports = ps.json()["components"][0]["ports"].clone();
    assert_eq!(ports, serde_json::json!([old]), "{}", ps.stdout);
    // Restarted, it runs and is probed on the new port.
    assert_eq!(f.run(&["restart", "llm"]).code, 0);
    let st = f.status_of("llm");
    assert_eq!(st["condition"], "ok", "{st}");
    assert_eq!(st["health"], "healthy", "{st}");
}

#[test]
fn down_after_an_up_killed_midway_stops_what_that_up_started() {
    // s = [c], c → b → a: kill -9 the `up` while b is starting (a is ready).
    let f = Fleet::new(
        &[
            svc("a", &[]),
            Svc {
                name: "b",
                flags: &["--status-before-ready", "503", "--ready-after", "60000"],
                deps: &["a"],
                extra: "",
            },
            svc("c", &["b"]),
        ],
        "[stacks.s]\ncomponents = [\"c\"]\n",
    );
    let mut cli = f.spawn(&["up", "s"]);
    assert!(wait_until(DEADLINE, || f.pid("b").is_some()));
    // While it starts, `ps` shows its pid.
    let starting = f.pid("b").unwrap();
    let mut row = serde_json::Value::Null;
    assert!(
        wait_until(DEADLINE, || {
            let ps = f.run(&["ps", "b", "--json"]).json();
            row = ps["components"]
                .as_array()
                .and_then(|rows| rows.iter().find(|r| r["name"] == "b"))
                .cloned()
                .unwrap_or_default();
            row["state"] == "starting"
        }),
        "{row}"
    );
    assert_eq!(row["pid"], starting, "{row}");
    cli.kill().unwrap();
    cli.wait().unwrap();
    let (a, b) = (f.pid("a").unwrap(), f.pid("b").unwrap());
    assert!(alive(a) && alive(b));
    // Only b, whose step had not completed, is blamed for the interruption.
    let sa = f.status_of("a");
    assert!(!sa.to_string().contains("interrupted"), "{sa}");
    let sb = f.status_of("b");
    assert!(sb.to_string().contains("interrupted"), "{sb}");
    let down = f.run(&["down", "s"]);
    assert_eq!(down.code, 0, "{}\n{}", down.stdout, down.stderr);
    assert!(
        wait_until(DEADLINE, || !alive(a) && !alive(b)),
        "down left what the interrupted up started running:\n{}\n{}",
        down.stdout,
        down.stderr
    );
    assert!(f.pid("c").is_none(), "c never started");
}

#[test]
fn a_recorded_pid_now_used_by_another_program_is_never_signalled() {
    let f = Fleet::new(&[svc("svc", &[])], "");
    assert_eq!(f.run(&["start", "svc"]).code, 0);
    let svc_pid = f.pid("svc").unwrap();
    // Another program, not started by Flotilla, now owns the pid the journal recorded
    // (simulated by pointing the journal at it): its start time differs.
    let other = Killed(Command::new("sleep").arg("300").spawn().unwrap());
    let other_pid = other.0.id() as i32;
    let conn = rusqlite::Connection::open(f.project_dir().join("state.db")).unwrap();
    conn.execute("UPDATE instances SET pid = ?1, pgid = ?1", [other_pid])
        .unwrap();
    drop(conn);
    let st = f.status_of("svc");
    assert_eq!(st["lifecycle"], "running", "{st}");
    assert_eq!(
        st["started_by"],
        serde_json::json!({"flotilla": {"operation": "op-1"}}),
        "{st}"
    );
    let stop = f.run(&["stop", "svc"]);
    assert_eq!(stop.code, 0, "{}\n{}", stop.stdout, stop.stderr);
    assert!(
        alive(other_pid),
        "a process whose identity did not match was signalled"
    );
    // The service itself carries the marker of the operation that started it, so it
    // was recognised as Flotilla's and stopped properly.
    assert!(!alive(svc_pid), "{}", stop.stderr);
}

impl Fleet {
    /// Starts `flotilla ARGS` in the background, its standard error appended to
    /// `spawned.stderr` in the workspace ([`Fleet::spawned_stderr`]).
    fn spawn(&self, args: &[&str]) -> Child {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.ws.path().join("spawned.stderr"))
            .unwrap();
        Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .current_dir(self.ws.path())
            .env("FLOTILLA_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::from(err))
            .spawn()
            .unwrap()
    }

    /// What the commands started by [`Fleet::spawn`] wrote on standard error.
    fn spawned_stderr(&self) -> String {
        std::fs::read_to_string(self.ws.path().join("spawned.stderr")).unwrap_or_default()
    }
}

#[allow(dead_code)]
fn unused(_: &Path) {}

#[test]
fn apply_runs_a_saved_plan_and_refuses_a_stale_one() {
    let f = Fleet::new(&[svc("one", &[]), svc("two", &["one"])], "");
    let plan = f.run(&["plan", "start", "two", "--json"]);
    assert_eq!(plan.code, 0, "{}", plan.stderr);
    f.ws.write("plan.json", &plan.stdout);
    let applied = f.run(&["apply", "plan.json"]);
    assert_eq!(applied.code, 0, "{}\n{}", applied.stdout, applied.stderr);
    assert!(alive(f.pid("one").unwrap()) && alive(f.pid("two").unwrap()));
    // What runs changed since the plan was computed: the same plan is now stale.
    let again = f.run(&["apply", "plan.json"]);
    assert_eq!(again.code, 1, "{}", again.stdout);
    assert!(
        again.stderr.contains("stale plan") && again.stderr.contains("what runs changed"),
        "{}",
        again.stderr
    );
    // It names what would be done differently now, and how to re-plan.
    assert!(
        again
            .stderr
            .contains("it would now: no-op one (was: start)")
            && again.stderr.contains("re-plan: `flotilla plan start two`"),
        "{}",
        again.stderr
    );
    // So is a plan computed before the inventory changed.
    let stop_plan = f.run(&["plan", "stop", "two", "--json"]);
    f.ws.write("stop.json", &stop_plan.stdout);
    let toml = std::fs::read_to_string(f.ws.path().join("flotilla.toml")).unwrap();
    f.ws.write(
        "flotilla.toml",
        &toml.replace("grace_period = \"2s\"", "grace_period = \"3s\""),
    );
    let stale = f.run(&["apply", "stop.json"]);
    assert_eq!(stale.code, 1, "{}", stale.stdout);
    assert!(
        stale.stderr.contains("the inventory changed"),
        "{}",
        stale.stderr
    );
    // The journal holds the applied operation and both refusals (stale plans are
    // refused like any operation), newest first.
    let ops = f.run(&["operations", "--json"]).json();
    let ops = ops.as_array().unwrap();
    assert_eq!(ops.len(), 3, "{ops:#?}");
    for refused in &ops[..2] {
        assert_eq!(refused["outcome"], "refused", "{refused:#}");
        assert!(
            refused["error"]
                .as_str()
                .unwrap()
                .starts_with("stale plan: "),
            "{refused:#}"
        );
    }
    let shown = f
        .run(&[
            "operations",
            "show",
            ops[2]["id"].as_str().unwrap(),
            "--json",
        ])
        .json();
    let steps: Vec<&str> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["component"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["one", "two"]);
    assert_eq!(shown["steps"][0]["outcome"], "succeeded");
}

#[test]
fn logs_show_a_components_output() {
    let f = Fleet::new(
        &[Svc {
            name: "talker",
            flags: &["--log-line", "hello from talker"],
            deps: &[],
            extra: "",
        }],
        "",
    );
    assert_eq!(f.run(&["start", "talker"]).code, 0);
    let log = f.project_dir().join("logs/talker.log");
    assert!(wait_until(DEADLINE, || std::fs::read_to_string(&log)
        .is_ok_and(|l| l.contains("hello from talker"))));
    let run = f.run(&["logs", "talker", "--tail", "5"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("hello from talker"), "{}", run.stdout);
    assert!(run.stdout.lines().count() <= 5, "{}", run.stdout);
    assert_eq!(f.run(&["logs", "nobody"]).code, 2);
}

#[test]
fn dry_run_changes_nothing() {
    let f = Fleet::new(&[svc("one", &[])], "");
    let run = f.run(&["start", "one", "--dry-run"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains("dry run: nothing was changed"),
        "{}",
        run.stdout
    );
    assert!(f.pid("one").is_none());
    assert!(
        !f.project_dir().join("state.db").exists()
            || f.run(&["operations", "--json"]).json() == serde_json::json!([])
    );
}

#[test]
fn ctrl_c_during_up_cleans_up_what_it_started() {
    interrupted_up_cleans_up(nix::sys::signal::Signal::SIGINT);
}

/// SIGTERM (what `timeout`, systemd and process-compose send) is asked to stop the
/// same way.
#[test]
fn sigterm_during_up_cleans_up_what_it_started() {
    interrupted_up_cleans_up(nix::sys::signal::Signal::SIGTERM);
}

fn interrupted_up_cleans_up(signal: nix::sys::signal::Signal) {
    let f = Fleet::new(
        &[
            svc("base", &[]),
            Svc {
                name: "slow",
                flags: &["--status-before-ready", "503", "--ready-after", "60000"],
                deps: &["base"],
                extra: "",
            },
        ],
        "[stacks.s]\ncomponents = [\"slow\"]\n",
    );
    let mut cli = f.spawn(&["up", "s"]);
    assert!(
        wait_until(DEADLINE * 2, || f.pid("slow").is_some()),
        "`slow` never started; `up` {:?} said:\n{}",
        cli.try_wait(),
        f.spawned_stderr()
    );
    let (base, slow) = (f.pid("base").unwrap(), f.pid("slow").unwrap());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(cli.id() as i32), signal).unwrap();
    let status = cli.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{status:?}");
    assert!(
        !alive(base) && !alive(slow),
        "an interrupted up left what it started running"
    );
    let ops = f.run(&["operations", "--json"]).json();
    assert_eq!(ops[0]["outcome"], "rolled-back", "{ops}");
}

/// A daemonising command (its leader exits at once, a child goes on writing): an
/// exit at start, said as such, and the child stopped.
#[test]
fn a_daemonising_command_is_an_exit_at_start() {
    let f = Fleet::new(&[], "[components.daemon]\ncommand = [\"sh\", \"-c\", \"(while true; do echo child-alive; sleep 0.3; done) & echo parent exiting; exit 0\"]\n");
    let run = f.run(&["start", "daemon"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    // Said as an exit (at once, or before it was ready), never as an identity that
    // could not be measured.
    assert!(run.stderr.contains("exit status 0"), "{}", run.stderr);
    assert!(
        !run.stderr.contains("could not be measured"),
        "{}",
        run.stderr
    );
    let ps = std::process::Command::new("pgrep")
        .args(["-f", "child-alive"])
        .output()
        .unwrap();
    assert!(!ps.status.success(), "the daemon's child lives on");
}

/// A process that exits at once: the failure shows what it wrote.
#[test]
fn a_start_that_exits_at_once_shows_its_last_lines() {
    let f = Fleet::new(
        &[],
        "[components.crashfast]\ncommand = [\"sh\", \"-c\", \"echo about to fail >&2; exit 7\"]\n",
    );
    let run = f.run(&["start", "crashfast"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    // Said as an exit, at once or while waiting for readiness (how soon it is seen
    // gone depends on the machine's load).
    assert!(run.stderr.contains("exit status 7"), "{}", run.stderr);
    assert!(
        run.stderr.contains("last lines of its log:") && run.stderr.contains("    about to fail"),
        "{}",
        run.stderr
    );
}

#[test]
fn apply_refuses_a_hand_edited_plan() {
    let f = Fleet::new(&[svc("one", &[]), svc("two", &["one"])], "");
    let plan = f.run(&["plan", "start", "two", "--json"]);
    // Swap the waves: `two` before its dependency.
    let mut p: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    let waves = p["waves"].as_array_mut().unwrap();
    waves.swap(0, 1);
    f.ws.write("edited.json", &p.to_string());
    let run = f.run(&["apply", "edited.json"]);
    assert_eq!(run.code, 1, "{}", run.stdout);
    assert!(run.stderr.contains("was it edited?"), "{}", run.stderr);
    assert!(
        f.pid("one").is_none() && f.pid("two").is_none(),
        "an edited plan was executed"
    );
}

#[test]
fn status_flags_a_running_component_whose_dependency_is_down() {
    let f = Fleet::new(&[svc("db", &[]), svc("api", &["db"])], "");
    assert_eq!(f.run(&["start", "api"]).code, 0);
    assert_eq!(f.run(&["stop", "db", "--force"]).code, 0);
    let st = f.status_of("api");
    assert_eq!(
        (st["lifecycle"].as_str(), st["condition"].as_str()),
        (Some("running"), Some("attention")),
        "{st}"
    );
    assert_eq!(f.run(&["status", "api"]).code, 1);
}

#[test]
fn a_state_dir_that_is_a_file_is_refused() {
    let f = Fleet::new(&[svc("one", &[])], "");
    f.ws.write("not-a-dir", "x");
    let run = common::run_with_env(
        f.ws.path(),
        &["status"],
        &[("FLOTILLA_STATE_DIR", "not-a-dir")],
    );
    // A state directory that cannot be used: a runtime failure.
    assert_eq!(run.code, 3, "{}", run.stdout);
    assert!(run.stderr.contains("is not a directory"), "{}", run.stderr);
}

#[test]
fn a_daemonising_command_leaves_nothing_behind() {
    let ws = Workspace::new();
    let pid_file = ws.path().join("bg.pid");
    ws.write(
        "flotilla.toml",
        &format!(
            "[components.bg]\ncommand = [\"sh\", \"-c\", \"sleep 300 & echo $! > {}; exit 0\"]\n",
            pid_file.display()
        ),
    );
    let run = ws.run(&["start", "bg"]);
    assert_eq!(
        run.code, 1,
        "a command that exits at once is not ready: {}",
        run.stderr
    );
    assert!(wait_until(DEADLINE, || pid_file.exists()));
    let bg: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_until(DEADLINE, || !alive(bg)),
        "the background child of a failed start survived its cleanup:\n{}",
        run.stderr
    );
}

#[test]
fn a_fast_branch_does_not_wait_for_a_slow_unrelated_one() {
    let f = Fleet::new(
        &[
            Svc {
                name: "slow",
                flags: &["--listen-after", "1500"],
                deps: &[],
                extra: "",
            },
            svc("after-slow", &["slow"]),
            svc("fast", &[]),
            svc("after-fast", &["fast"]),
        ],
        "[stacks.all]\ncomponents = [\"after-slow\", \"after-fast\"]\n",
    );
    let run = f.run(&["up", "all"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // `after-fast` is in the second wave with `after-slow`, but only waits for `fast`.
    assert!(
        f.listened_at("after-fast") < f.listened_at("slow"),
        "after-fast waited for the slow, unrelated branch"
    );
    assert!(f.listened_at("after-slow") > f.listened_at("slow"));
}

/// A command whose main process exits after it is ready while a child it forked
/// keeps running in the process group Flotilla made for it (supervisor-style or
/// daemonising commands, here with the instance marker scrubbed from the child's
/// environment): the group is the component's. Status says it runs, with evidence,
/// and stop stops the child.
#[test]
fn a_child_outliving_its_leader_in_the_components_group_is_the_component() {
    let ws = Workspace::new();
    let child_file = ws.path().join("child.pid");
    let leader_file = ws.path().join("leader.pid");
    ws.write(
        "flotilla.toml",
        &format!(
            "[components.sup]\ncommand = [\"sh\", \"-c\", \"echo $$ > {}; env -u FLOTILLA_INSTANCE sleep 300 & echo $! > {}; sleep 1; exit 0\"]\n\
             stop = {{ grace_period = \"2s\" }}\n",
            leader_file.display(),
            child_file.display()
        ),
    );
    let run = ws.run(&["start", "sup"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let read = |p: &Path| -> i32 { std::fs::read_to_string(p).unwrap().trim().parse().unwrap() };
    assert!(wait_until(DEADLINE, || child_file.exists()));
    let (leader, child) = (read(&leader_file), read(&child_file));
    let _guard = common::KillOnDrop(child as u32);
    assert!(wait_until(DEADLINE, || !alive(leader)), "the leader exits");
    assert!(alive(child));

    let st = ws.run(&["status", "--json", "sup"]).json();
    let c = &st["components"][0];
    assert_eq!(c["lifecycle"], "running", "{c:#}");
    assert_ne!(c["condition"], "down-unexpectedly", "{c:#}");
    assert_eq!(c["started_by"]["flotilla"]["operation"], "op-1", "{c:#}");
    let ev = serde_json::to_string(&c["evidence"]).unwrap();
    assert!(
        ev.contains(&format!("process group {leader} lives on: pid {child}")),
        "{ev}"
    );

    let stop = ws.run(&["stop", "sup"]);
    assert_eq!(stop.code, 0, "{}\n{}", stop.stdout, stop.stderr);
    assert!(
        wait_until(DEADLINE, || !alive(child)),
        "stop stops the group's survivor:\n{}",
        stop.stdout
    );
    let st = ws.run(&["status", "--json", "sup"]).json();
    assert_eq!(st["components"][0]["lifecycle"], "stopped", "{st:#}");
}

/// A running component's log is rotated once it is over 10 MiB (by its log writer,
/// or by the next mutating invocation), not only when the component starts; the
/// component keeps writing to the (truncated) log.
#[test]
fn a_running_components_log_is_rotated_by_the_next_operation() {
    let f = Fleet::new(
        &[
            Svc {
                name: "chatty",
                flags: &["--log-every", "20"],
                deps: &[],
                extra: "",
            },
            svc("other", &[]),
        ],
        "",
    );
    assert_eq!(f.run(&["start", "chatty"]).code, 0);
    let log = f.project_dir().join("logs/chatty.log");
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&log)
            .expect("the log exists");
        let block = vec![b'x'; 1 << 20];
        for _ in 0..11 {
            file.write_all(&block).unwrap();
        }
        file.write_all(b"\nBEFORE ROTATION\n").unwrap();
    }
    let run = f.run(&["start", "other"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // Rotated by the next operation, or already by chatty's log writer when its
    // next line found the log past its cap (the copy holding the big block may be
    // .1 or, after both, .2).
    let copies: Vec<Vec<u8>> = (1..=3)
        .filter_map(|n| std::fs::read(f.project_dir().join(format!("logs/chatty.log.{n}"))).ok())
        .collect();
    assert!(
        copies
            .iter()
            .any(|c| String::from_utf8_lossy(c).contains("BEFORE ROTATION")),
        "the big log was not rotated: {} copies",
        copies.len()
    );
    assert!(
        std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0) < 10 << 20,
        "the log is still past its cap"
    );
    assert!(
        wait_until(DEADLINE, || std::fs::read_to_string(&log)
            .is_ok_and(|l| l.len() < 1 << 20 && l.contains("TICK"))),
        "the running component keeps writing to its truncated log"
    );
    assert_eq!(f.status_of("chatty")["lifecycle"], "running");
}

/// A child that left the component's process group (`setsid`) still carries the
/// component's instance marker: stop stops it too, and says so.
#[test]
fn stop_also_stops_a_child_that_left_the_process_group() {
    let ws = Workspace::new();
    let esc = ws.path().join("escaped.pid");
    ws.write(
        "flotilla.toml",
        &format!(
            "[components.esc]\ncommand = [\"sh\", \"-c\", \"setsid sh -c 'echo $$ > {}; exec sleep 312' & exec sleep 313\"]\n\
             stop = {{ grace_period = \"2s\" }}\n",
            esc.display()
        ),
    );
    let run = ws.run(&["start", "esc"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert!(wait_until(DEADLINE, || esc.exists()));
    let escaped: i32 = std::fs::read_to_string(&esc)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _guard = common::KillOnDrop(escaped as u32);
    assert!(alive(escaped));
    let stop = ws.run(&["stop", "esc"]);
    assert_eq!(stop.code, 0, "{}\n{}", stop.stdout, stop.stderr);
    assert!(
        wait_until(DEADLINE, || !alive(escaped)),
        "the escaped child survived stop:\n{}{}",
        stop.stdout,
        stop.stderr
    );
    assert!(
        format!("{}{}", stop.stdout, stop.stderr).contains("left its process group"),
        "{}{}",
        stop.stdout,
        stop.stderr
    );
}
