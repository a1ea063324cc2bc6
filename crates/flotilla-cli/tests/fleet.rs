//! The fleet end to end on this machine: a real `flotilla serve`, a real `flotilla
//! agent` joined to it with a one-time token and the CA pin, revisions published
//! from an inventory and converged by the agent on real processes, status through
//! the authority (`status --server`), an agent that goes away shown `unreachable`
//! with its last-known state while its components keep running, an authority
//! killed with `kill -9` that the agent reconnects to by itself, and no secret
//! value anywhere the authority keeps or answers.

mod common;

use common::agent::AgentProc;
use common::authority::{free_port, Authority, CANARY};
use flotilla_testkit::{alive, wait_until};
use std::process::{Command, Stdio};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(40);

fn inventory(port_a: u16, port_b: Option<u16>) -> String {
    let kit = flotilla_testkit::binary();
    let mut t = format!(
        r#"
[hosts.studio]
transport = "agent"

[components.a]
host = "studio"
command = [{kit:?}, "--pid-file", "a.pid", "--listen", "127.0.0.1:{port_a}"]
env = {{ API_KEY = {{ secret = "MODEL_KEY" }} }}
endpoints = {{ api = "127.0.0.1:{port_a}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}
"#
    );
    if let Some(p) = port_b {
        t.push_str(&format!(
            r#"
[components.b]
host = "studio"
command = [{kit:?}, "--pid-file", "b.pid", "--listen", "127.0.0.1:{p}"]
depends_on = ["a"]
endpoints = {{ api = "127.0.0.1:{p}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}
"#
        ));
    }
    t
}

/// `flotilla status --server --json` through the authority.
fn fleet_status(a: &Authority) -> serde_json::Value {
    let r = a.run(&["status", "--json"]);
    serde_json::from_str(&r.stdout).unwrap_or(serde_json::Value::Null)
}

fn component(status: &serde_json::Value, name: &str) -> serde_json::Value {
    status["components"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or(serde_json::Value::Null)
}

fn wait_for(
    a: &Authority,
    agent: &AgentProc,
    what: &str,
    mut cond: impl FnMut(&serde_json::Value) -> bool,
) {
    let mut last = serde_json::Value::Null;
    if !wait_until(DEADLINE, || {
        last = fleet_status(a);
        cond(&last)
    }) {
        panic!(
            "timed out waiting for {what}\nagent log:\n{}\nlast status:\n{last:#}",
            agent.log()
        );
    }
}

#[test]
fn an_agent_converges_reports_and_survives_partitions_of_its_authority() {
    let (pa, pb) = (free_port(), free_port());
    let mut a = Authority::with(&inventory(pa, None), &["--report-deadline", "2s"]);
    let mut agent = AgentProc::new(a.ws.path());

    // Join: a wrong CA pin is refused; the right one works once per token.
    let t = a.run(&["serve", "token", "create", "--host", "studio", "--json"]);
    assert_eq!(t.code, 0, "{t:?}");
    let t = t.json();
    let (token, pin) = (t["token"].as_str().unwrap(), t["ca_hash"].as_str().unwrap());
    let wrong = format!("sha256:{}", "1".repeat(64));
    let out = agent.join(&a.url, token, &wrong);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to trust it"));
    let out = agent.join(&a.url, token, pin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = agent.join(&a.url, token, pin);
    assert!(!out.status.success(), "a join token works once");
    assert!(String::from_utf8_lossy(&out.stderr).contains("used already"));

    // Publish, then the agent brings `a` up on this machine.
    let p = a.publish(&["--json"]);
    assert_eq!(p.code, 0, "{p:?}");
    let rev1 = p.json()["revision"].as_str().unwrap().to_string();
    agent.start();
    wait_for(
        &a,
        &agent,
        "a to run, reported through the authority",
        |s| {
            let c = component(s, "a");
            c["lifecycle"] == "running" && c["observability"] == "observed"
        },
    );
    let a1 = agent.pid("a").unwrap();
    assert!(alive(a1));
    let host = a.run(&["status"]);
    assert_eq!(host.code, 0, "all as desired: {host:?}");
    assert!(!host.stdout.contains("host local"), "{}", host.stdout);
    assert!(
        host.stdout.contains("host studio: observed")
            && host.stdout.contains("on the selected revision"),
        "{}",
        host.stdout
    );
    assert!(host.stdout.contains(&rev1), "{}", host.stdout);

    // A new revision adds `b`; `a` is not restarted.
    a.ws.write("fleet/flotilla.toml", &inventory(pa, Some(pb)));
    assert_eq!(a.publish(&[]).code, 0);
    wait_for(&a, &agent, "b to run", |s| {
        component(s, "b")["lifecycle"] == "running"
    });
    assert_eq!(agent.pid("a"), Some(a1), "a kept running untouched");

    // Operations through the authority (the `agent` transport): the controller's
    // steps are queued for the agent, run by its executor and answered.
    let b0 = agent.pid("b").unwrap();
    let stop = a.run(&["-f", "fleet/flotilla.toml", "stop", "b"]);
    assert_eq!(stop.code, 0, "{stop:?}\nagent log:\n{}", agent.log());
    assert!(!alive(b0), "b was stopped by its agent");
    wait_for(
        &a,
        &agent,
        "b reported stopped, as drift the agent leaves alone",
        |s| component(s, "b")["lifecycle"] == "stopped",
    );
    assert_eq!(agent.pid("a"), Some(a1));
    let start = a.run(&["-f", "fleet/flotilla.toml", "start", "b"]);
    assert_eq!(start.code, 0, "{start:?}\nagent log:\n{}", agent.log());
    let b_new = agent.pid("b").unwrap();
    assert!(b_new != b0 && alive(b_new));
    // Its log, read on studio by its agent.
    let logs = a.run(&["-f", "fleet/flotilla.toml", "logs", "b", "-n", "20"]);
    assert_eq!(logs.code, 0, "{logs:?}");
    assert!(
        logs.stdout.contains(&format!("started pid {b_new}")),
        "{}",
        logs.stdout
    );
    let ops = a.run(&["-f", "fleet/flotilla.toml", "operations", "--json"]);
    assert!(ops.stdout.contains("start b"), "{}", ops.stdout);

    // The agent goes away: its components keep running; after the deadline the
    // authority shows them unreachable with their last-known state, never stopped.
    agent.kill9();
    wait_for(&a, &agent, "a to be unreachable", |s| {
        let c = component(s, "a");
        c["observability"] == "unreachable" && c["last_known"]["lifecycle"] == "running"
    });
    let text = a.run(&["status"]);
    assert_eq!(text.code, 1, "an unreachable host is not all ok");
    assert!(
        text.stdout.contains("unreachable (last: running,"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("host studio: unreachable"),
        "{}",
        text.stdout
    );
    assert!(alive(a1) && agent.pid("b").is_some_and(alive));

    // The agent returns: nothing restarts.
    let b1 = agent.pid("b").unwrap();
    assert_eq!(b1, b_new);
    agent.start();
    wait_for(&a, &agent, "a to be observed again", |s| {
        component(s, "a")["observability"] == "observed"
    });
    assert_eq!((agent.pid("a"), agent.pid("b")), (Some(a1), Some(b1)));

    // The authority is killed with kill -9 and comes back: the agent reconnects by
    // itself, nothing restarts, and a later revision still reaches it.
    a.kill9();
    a.start();
    a.ws.write("fleet/flotilla.toml", &inventory(pa, None));
    assert_eq!(a.publish(&[]).code, 0);
    wait_for(
        &a,
        &agent,
        "b to be removed after the authority restarted",
        |s| component(s, "b").is_null() || component(s, "b")["lifecycle"] == "stopped",
    );
    assert!(!alive(b1), "b was stopped");
    assert_eq!(agent.pid("a"), Some(a1), "a never restarted");

    // No secret value in what the authority keeps or answers.
    let mut everything = std::fs::read(a.db()).unwrap();
    for f in ["authority.db-wal", "authority.db-shm"] {
        everything.extend(std::fs::read(a.dir.join(f)).unwrap_or_default());
    }
    everything.extend(a.run(&["status", "--json", "-v"]).stdout.as_bytes());
    everything.extend(a.run(&["config", "history", "--json"]).stdout.as_bytes());
    assert!(
        !everything
            .windows(CANARY.len())
            .any(|w| w == CANARY.as_bytes()),
        "the canary secret leaked into the authority"
    );
}

#[test]
fn killing_the_authority_during_an_operation_loses_and_repeats_nothing() {
    let port = free_port();
    let kit = flotilla_testkit::binary();
    // `slow` listens 2.5 s after it starts: a restart is in flight that long.
    let inv = format!(
        r#"
[hosts.studio]
transport = "agent"

[components.slow]
host = "studio"
command = [{kit:?}, "--pid-file", "slow.pid", "--listen", "127.0.0.1:{port}", "--listen-after", "2500"]
endpoints = {{ api = "127.0.0.1:{port}" }}
readiness = {{ tcp = {{ endpoint = "api" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}
"#
    );
    let mut a = Authority::with(&inv, &["--report-deadline", "3s"]);
    let mut agent = AgentProc::joined(&a, "studio");
    assert_eq!(a.publish(&[]).code, 0);
    agent.start();
    wait_for(&a, &agent, "slow to run", |s| {
        component(s, "slow")["lifecycle"] == "running"
    });
    let before = agent.pid("slow").unwrap();

    // `restart slow` through the authority; the authority is killed (-9) while the
    // agent is in the middle of it, and started again.
    let env = a.env();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.args(["-f", "fleet/flotilla.toml", "restart", "slow"])
        .current_dir(a.ws.path())
        .env("FLOTILLA_STATE_DIR", a.ws.path().join(".flotilla-state"))
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &env {
        cmd.env(k, v);
    }
    let restart = cmd.spawn().unwrap();
    let mut during = None;
    assert!(
        wait_until(DEADLINE, || {
            during = agent.pid("slow").filter(|p| *p != before && alive(*p));
            during.is_some()
        }),
        "the agent never began the restart:\n{}",
        agent.log()
    );
    a.kill9();
    a.start();
    let out = restart.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "the restart's answer survives the authority's restart:\n{stdout}\n{stderr}\nagent log:\n{}",
        agent.log()
    );
    // Exactly one restart happened: the pid the agent started during it still runs.
    assert_eq!(agent.pid("slow"), during);
    assert!(!alive(before));
    let journal = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["-f", "fleet/flotilla.toml", "operations", "--json"])
        .current_dir(a.ws.path())
        .env("FLOTILLA_STATE_DIR", &agent.state)
        .env_remove("FLOTILLA_SERVER")
        .output()
        .unwrap();
    let ops: serde_json::Value = serde_json::from_slice(&journal.stdout).unwrap();
    let restarts = ops
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["verb"] == "restart" && o["target"] == "slow")
        .count();
    assert_eq!(restarts, 1, "the agent ran the restart once: {ops:#}");
    // And the agent is connected again by itself.
    wait_for(&a, &agent, "the agent to report again", |s| {
        component(s, "slow")["observability"] == "observed"
            && component(s, "slow")["lifecycle"] == "running"
    });
}

/// `check` of a component on an `agent` host is run by that host's agent (through the
/// authority), and its own refusal — a secrets file others can read — reaches the
/// controller in its words: in `check`, and in an operation's refusal, instead of a
/// guess that nothing usable runs there. `logs -f` of it says what to run instead.
#[test]
fn check_and_refusals_of_an_agent_host_come_from_its_agent() {
    let pa = free_port();
    let a = Authority::with(&inventory(pa, None), &["--report-deadline", "2s"]);
    let mut agent = AgentProc::joined(&a, "studio");
    assert_eq!(a.publish(&[]).code, 0);
    agent.start();
    wait_for(&a, &agent, "a to run", |s| {
        let c = component(s, "a");
        c["lifecycle"] == "running" && c["observability"] == "observed"
    });

    // Checked by the agent on its own host.
    let check = a.run(&["-f", "fleet/flotilla.toml", "check"]);
    assert_eq!(check.code, 0, "{check:?}\nagent log:\n{}", agent.log());
    assert!(check.stdout.contains("host studio:"), "{}", check.stdout);
    assert!(
        check.stdout.contains("a: environment") && check.stdout.contains("a: program"),
        "{}",
        check.stdout
    );
    assert!(!check.stdout.contains("host local"), "{}", check.stdout);

    // `logs -f` of it: followed through its agent. A line appended to its log on
    // the agent's host shows up.
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["-f", "fleet/flotilla.toml", "logs", "-f", "-n", "1", "a"])
        .current_dir(a.ws.path())
        .envs(a.env())
        .env_remove("FLOTILLA_FILE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let rx = common::lines_of(follow.stdout.take().unwrap());
    // The agent's project directory holds the log.
    let log = std::fs::read_dir(agent.state.join("projects"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("logs/a.log"))
        .chain(std::iter::once(agent.state.join("logs/a.log")))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("no log of a under {}", agent.state.display()));
    let mut seen = Vec::new();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut appended = false;
    let found = loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break false;
        }
        match rx.recv_timeout(left.min(std::time::Duration::from_millis(200))) {
            Ok(line) => {
                let hit = line == "FOLLOWED THROUGH THE AGENT";
                seen.push(line);
                if hit {
                    break true;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break false,
        }
        // Once the first lines were printed (it follows from there), append one.
        if !appended && !seen.is_empty() {
            use std::io::Write as _;
            let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            writeln!(
                f,
                "2026-12-02T10:00:00.000Z stdout F FOLLOWED THROUGH THE AGENT"
            )
            .unwrap();
            appended = true;
        }
    };
    let _ = follow.kill();
    let out = follow.wait_with_output().unwrap();
    assert!(
        found,
        "not followed through the agent ({}):\n{}\nstderr:\n{}",
        log.display(),
        seen.join("\n"),
        String::from_utf8_lossy(&out.stderr)
    );

    // Its secrets file readable by others: the agent refuses, in its own words.
    let secrets = agent.state.join("secrets.env");
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refusal = format!(
        "secrets file {path} has mode 0644, readable by others: run `chmod 600 {path}`",
        path = secrets.display()
    );
    let check = a.run(&["-f", "fleet/flotilla.toml", "check"]);
    assert_eq!(check.code, 1, "{check:?}");
    assert!(check.stdout.contains(&refusal), "{}", check.stdout);
    let stop = a.run(&["-f", "fleet/flotilla.toml", "stop", "a"]);
    assert_eq!(stop.code, 1, "{stop:?}");
    let said = format!("{}{}", stop.stdout, stop.stderr);
    assert!(said.contains(&refusal), "{said}");
    assert!(!said.contains("no usable flotilla"), "{said}");
    assert!(agent.pid("a").is_some_and(alive), "a left running");
}

/// `flotilla discover studio --server …` on an agent host: asked through the
/// authority and answered by the host's agent (its own `/proc` and loopback): a
/// service started there by hand is proposed for that host, and the component the
/// agent converged is left out as started by flotilla.
#[test]
fn discover_on_an_agent_host_is_answered_by_its_agent() {
    let (pa, hand) = (free_port(), free_port());
    let a = Authority::with(&inventory(pa, None), &["--report-deadline", "2s"]);
    let mut agent = AgentProc::joined(&a, "studio");
    assert_eq!(a.publish(&[]).code, 0);
    agent.start();
    wait_for(&a, &agent, "a to run", |s| {
        component(s, "a")["lifecycle"] == "running"
    });
    let mut by_hand = Command::new(flotilla_testkit::binary())
        .args(["--listen", &format!("127.0.0.1:{hand}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = common::KillOnDrop(by_hand.id());
    let mut report = serde_json::Value::Null;
    let asked = wait_until(DEADLINE, || {
        let run = a.run(&[
            "-f",
            "fleet/flotilla.toml",
            "discover",
            "studio",
            "--json",
            "--port",
            &pa.to_string(),
            "--port",
            &hand.to_string(),
        ]);
        report = serde_json::from_str(&run.stdout).unwrap_or_default();
        run.code == 0 && report["findings"].as_array().is_some_and(|f| !f.is_empty())
    });
    let _ = by_hand.kill();
    let _ = by_hand.wait();
    assert!(asked, "{report:#}\nagent log:\n{}", agent.log());
    assert_eq!(report["host"], "studio", "{report:#}");
    let findings = report["findings"].as_array().unwrap();
    assert_eq!(findings.len(), 1, "{report:#}");
    assert_eq!(findings[0]["process"]["pid"], by_hand.id(), "{report:#}");
    assert_eq!(findings[0]["proposal"]["host"], "studio", "{report:#}");
    let skipped = report["skipped"].to_string();
    assert!(
        skipped.contains("started by flotilla: component `a`"),
        "{skipped}"
    );
}
