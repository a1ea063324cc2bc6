//! `flotilla release unskip` with real processes: a real authority (`flotilla serve`)
//! and a real agent joined to it, running by hand from an install root whose
//! `skip.json` holds a version that rolled back there before.
//!
//! What is proven: a rollout of that version is refused `Skipped` on the host (and
//! `release status` says how to allow it again); `release unskip VERSION --host edge`
//! returns once the host's agent confirmed, printing what it cleared, and `skip.json`
//! no longer holds it; a new rollout of the same version then succeeds, measured. An
//! unknown host and a host that is not an agent host are refused with a message that
//! says so. A request made while the host's agent is down survives a restart of the
//! authority and is carried out when the agent comes back.

mod common;

use common::release::{good_build, run_program as run};

use common::authority::Authority;
use flotilla_release::{InstallRoot, Reason, SkipEntry};
use flotilla_testkit::wait_until;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(60);

/// The agent host `edge`: this `flotilla` installed in an install root, joined to the
/// authority, trusting a release key of the test's.
struct Edge {
    dir: tempfile::TempDir,
    root: InstallRoot,
    state: PathBuf,
    /// The release signing key (secret), for `release sign`.
    key: PathBuf,
    /// The `agent run` arguments.
    args: Vec<String>,
}

impl Edge {
    /// Installs, joins `a` as host `edge` (the agent is not started).
    fn join(a: &Authority) -> Edge {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("state");
        let root_dir = dir.path().join("root");
        let r = run(
            Path::new(env!("CARGO_BIN_EXE_flotilla")),
            dir.path(),
            &["agent", "install", "--root", root_dir.to_str().unwrap()],
            &state,
        );
        assert_eq!(r.0, 0, "agent install: {r:?}");
        let root = InstallRoot::new(&root_dir, "flotilla");
        let t = a.run(&["serve", "token", "create", "--host", "edge", "--json"]);
        assert_eq!(t.code, 0, "{t:?}");
        let t = t.json();
        let r = run(
            &root.current_link().join("flotilla"),
            dir.path(),
            &[
                "agent",
                "join",
                &a.url,
                t["token"].as_str().unwrap(),
                "--ca-hash",
                t["ca_hash"].as_str().unwrap(),
            ],
            &state,
        );
        assert_eq!(r.0, 0, "agent join: {r:?}");
        let k = flotilla_release::keygen(dir.path(), "release", false).unwrap();
        let args = [
            "agent",
            "run",
            "--state-dir",
            state.to_str().unwrap(),
            "--supervisor",
            "none",
            "--trusted-key",
            k.public_path.to_str().unwrap(),
            "--wait",
            "2s",
            "--check-every",
            "500ms",
            "--report-every",
            "1s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        Edge {
            dir,
            root,
            state,
            key: k.secret_path,
            args,
        }
    }

    /// Starts the agent from `<root>/current/flotilla`; waits until it reported.
    fn start(&self) -> u32 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("agent.log"))
            .unwrap();
        let mut child = Command::new(self.root.current_link().join("flotilla"))
            .args(&self.args)
            .current_dir(self.dir.path())
            .env("HOME", self.dir.path())
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_SERVER")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the agent");
        let pid = child.id();
        std::thread::spawn(move || {
            let _ = child.wait();
        });
        self.wait(&format!("agent pid {pid} to report"), || {
            std::fs::read_to_string(self.state.join("agent/reported.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .is_some_and(|r| r["pid"] == pid)
        });
        pid
    }

    /// What the host's processes wrote, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (name, path) in [
            ("agent", self.dir.path().join("agent.log")),
            ("agent.log", self.state.join("agent/agent.log")),
            (
                "update-watch.log",
                self.state.join("agent/update-watch.log"),
            ),
            ("skip.json", self.root.skip_path()),
            ("update.json", self.root.update_path()),
        ] {
            if let Ok(t) = std::fs::read_to_string(path) {
                out.push_str(&format!("--- {name}:\n{t}\n"));
            }
        }
        out
    }

    fn wait(&self, what: &str, cond: impl FnMut() -> bool) {
        if !wait_until(DEADLINE, cond) {
            panic!("timed out waiting for {what}\n{}", self.logs());
        }
    }

    /// Records `version` (artifact `sha256`, 64 hex) as rolled back here, as the
    /// watchdog does after a rollback.
    fn skip(&self, version: &str, sha256: &str) {
        self.root
            .add_skip(SkipEntry {
                name: "flotilla-agent".into(),
                version: version.into(),
                sha256: sha256.into(),
                reason: Reason::HealthTimeout,
                at_ms: 1_700_000_000_000,
            })
            .unwrap();
    }
}

impl Drop for Edge {
    fn drop(&mut self) {
        // Every agent and watchdog of this host names its state directory.
        for _ in 0..3 {
            for pid in common::pids_with_arg(self.state.to_str().unwrap()) {
                common::kill9(pid);
            }
        }
    }
}

fn platform() -> String {
    let (os, arch) = flotilla_release::Platform::current();
    format!("{os}-{arch}")
}

/// An authority whose selected revision has the agent host `edge` (and `extra`).
fn authority(extra: &str) -> Authority {
    let a = Authority::new(&format!("[hosts.edge]\ntransport = \"agent\"\n{extra}"));
    let p = a.publish(&[]);
    assert_eq!(p.code, 0, "{p:?}");
    a
}

/// Rolls flotilla-agent `version` out to every agent host and approves it; waits for
/// the rollout to end; its document.
fn roll_out(a: &Authority, e: &Edge, version: &str) -> serde_json::Value {
    let r = common::release::create_rollout(
        |args| a.run(args),
        "flotilla-agent",
        version,
        "",
        1,
        "1s",
        "30s",
    );
    let id = r["id"].as_u64().expect("the rollout's id").to_string();
    let approve = a.run(&["release", "approve", &id]);
    assert_eq!(approve.code, 0, "{approve:?}");
    let mut last = serde_json::Value::Null;
    let ended = wait_until(DEADLINE, || {
        let s = a.run(&["release", "status", &id, "--json"]);
        last = if s.code == 0 {
            s.json()
        } else {
            serde_json::Value::Null
        };
        matches!(last["phase"].as_str(), Some("Succeeded" | "Failed"))
    });
    assert!(ended, "rollout {id} did not end: {last:#}\n{}", e.logs());
    last
}

#[test]
fn a_skipped_release_is_allowed_again_by_unskip_through_the_authority() {
    let a = authority("");
    let e = Edge::join(&a);
    let build = good_build("unskip");
    let (_, sha) = common::release::publish(
        |args| a.run(args),
        a.ws.path(),
        "flotilla-agent",
        "0.2.0",
        1,
        &platform(),
        &build,
        e.key.to_str().unwrap(),
    );
    let hex = sha.trim_start_matches("sha256:").to_string();
    e.skip("0.2.0", &hex);
    e.start();

    // The host refuses it, whoever rolls it out.
    let r = roll_out(&a, &e, "0.2.0");
    assert_eq!(r["phase"], "Failed", "{r:#}\n{}", e.logs());
    assert_eq!(r["hosts"][0]["phase"], "Failed", "{r:#}");
    assert_eq!(r["hosts"][0]["reason"], "Skipped", "{r:#}");
    let status = a.run(&["release", "status", &r["id"].to_string()]);
    assert!(
        status
            .stdout
            .contains("`flotilla release unskip 0.2.0 --host edge` allows it again"),
        "{status:?}"
    );

    // Cleared through the authority: the command returns once the agent confirmed.
    let u = a.run(&["release", "unskip", "0.2.0", "--host", "edge"]);
    assert_eq!(u.code, 0, "{u:?}\n{}", e.logs());
    assert!(
        u.stdout.contains("cleared flotilla-agent 0.2.0 on edge"),
        "{u:?}"
    );
    assert!(
        u.stdout.contains(&format!("sha256:{}", &hex[..12]))
            && u.stdout.contains("rolled back HealthTimeout"),
        "{u:?}"
    );
    assert_eq!(e.root.skipped(&hex).unwrap(), None, "{}", e.logs());
    assert!(
        e.logs()
            .contains("flotilla-agent 0.2.0 allowed again: removed sha256:"),
        "the agent logs what it removed\n{}",
        e.logs()
    );
    // Again, as JSON: nothing left to clear.
    let again = a.run(&["release", "unskip", "0.2.0", "--host", "edge", "--json"]);
    assert_eq!(again.code, 0, "{again:?}");
    let again = again.json();
    assert_eq!(again["state"], "done", "{again:#}");
    assert!(again.get("cleared").is_none(), "{again:#}");

    // A new rollout of the same release now applies it, measured.
    let r = roll_out(&a, &e, "0.2.0");
    assert_eq!(r["phase"], "Succeeded", "{r:#}\n{}", e.logs());
    assert_eq!(r["hosts"][0]["phase"], "Updated", "{r:#}");
    assert_eq!(r["hosts"][0]["running_sha256"], sha, "{r:#}");
}

#[test]
fn unskip_refuses_an_unknown_host_and_a_host_that_is_not_an_agent_host() {
    let a = authority("[hosts.box]\ntransport = \"ssh\"\n");
    // An unknown host is a usage error (404 → exit 2), like every unknown name.
    let r = a.run(&["release", "unskip", "0.2.0", "--host", "nowhere"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("no host `nowhere`") && r.stderr.contains("not in the selected revision"),
        "{r:?}"
    );
    let r = a.run(&["release", "unskip", "0.2.0", "--host", "box"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("host `box` is a `ssh` host, not an agent host"),
        "{r:?}"
    );
    // A component release that no component of the host declares.
    let r = a.run(&[
        "release",
        "unskip",
        "0.2.0",
        "--host",
        "edge",
        "--name",
        "llama-server",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .contains("no component of host `edge` declares release `llama-server`"),
        "{r:?}"
    );
}

#[test]
fn a_pending_unskip_survives_an_authority_restart() {
    let mut a = authority("");
    let e = Edge::join(&a);
    let hex = "c".repeat(64);
    e.skip("0.3.0", &hex);
    e.skip("0.4.0", &"d".repeat(64));
    // The agent is down: the request is recorded and waits.
    let u = a.run(&[
        "release",
        "unskip",
        "0.3.0",
        "--host",
        "edge",
        "--no-wait",
        "--json",
    ]);
    assert_eq!(u.code, 0, "{u:?}");
    let u = u.json();
    assert_eq!(u["state"], "pending", "{u:#}");
    let id = u["id"].as_u64().unwrap();
    // Not confirmed in time (nobody to confirm): refused, and still pending.
    let late = a.run(&[
        "release",
        "unskip",
        "0.3.0",
        "--host",
        "edge",
        "--timeout",
        "1s",
    ]);
    assert_eq!(late.code, 1, "{late:?}");
    assert!(
        late.stderr.contains(&format!(
            "did not confirm clearing flotilla-agent 0.3.0 within 1s: unskip {id} stays pending"
        )),
        "{late:?}"
    );

    a.kill9();
    a.start();
    e.start();
    e.wait("the agent to clear 0.3.0", || {
        e.root.skipped(&hex).is_ok_and(|s| s.is_none())
    });
    assert_eq!(e.root.skip_list().unwrap().len(), 1, "0.4.0 stays");
    // The request made before the restart is the one carried out.
    let op = flotilla_server::authority::OperatorFile::read(&a.dir.join("operator.json")).unwrap();
    let client = flotilla_api::Client::new(&a.url, &op.ca_pem, Some(op.credential)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let done = rt.block_on(client.unskip(id, DEADLINE)).unwrap();
    assert_eq!(
        done.state,
        flotilla_api::wire::UnskipState::Done,
        "{done:#?}\n{}",
        e.logs()
    );
    let cleared: Vec<&str> = done.cleared.iter().map(|c| c.version.as_str()).collect();
    assert_eq!(cleared, ["0.3.0"], "{done:#?}");
}
