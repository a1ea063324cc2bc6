//! The fleet on the test hosts of `scripts/testnet`: a real `flotilla serve` here, in
//! the root network namespace, listening on the testnet bridge (10.213.77.1), and
//! three real agents joined to it, each with its own one-time token and the CA pin —
//! on h1 and h2 as plain processes inside their network namespaces, on h4 (whose
//! PID 1 is a real systemd) as the system unit `flotilla agent unit --systemd`
//! prints, installed and started over SSH. One stand-in service per host, published
//! as a revision with `transport = "agent"` hosts, comes up through each host's
//! agent; `flotilla status --server` shows all three running and observed.
//!
//! Then h1 is partitioned for 60 s (its link down): its component
//! keeps running (its pid, looked at inside h1's namespace, answers throughout), the
//! authority shows it `unreachable` with its last-known `running` state and its age,
//! while h2 and h4 stay observed; when the link returns h1 is observed again and no
//! component on any of the three hosts was restarted (every pid the same before and
//! after, still answering on its host).
//!
//! It shares the hosts with the other multi-host tests (it partitions one), so it runs
//! in nextest's serial `testnet` group (`.config/nextest.toml`, `binary(=fleet_hosts)`)
//! and holds [`testnet::lock`] under `cargo test`. Every wait is on a condition with a
//! deadline; the only timed stretch is the partition itself, spent checking. A
//! [`Fleet`] guard takes down what it started (agents, the unit, the components, the
//! authority, the files on the hosts), even when the test panics.

mod common;

use common::{kill9, pids_with_arg, run_with_env, KillOnDrop, Run};
use flotilla_testkit::testnet::{self, TestHost, Testnet};
use flotilla_testkit::{alive, free_port, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The testnet bridge's address on this machine: where the authority listens.
const BRIDGE: &str = "10.213.77.1";

/// How long any one condition may take; the test moves on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(60);

/// How long h1 stays partitioned.
const PARTITION: Duration = Duration::from_secs(60);

/// How often the partition's checks look (status, and the component on h1).
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// After this long without a report, the authority shows a host `unreachable`.
const REPORT_DEADLINE: &str = "5s";

/// The hosts that run agents, h4 (the systemd host) under systemd.
const HOSTS: [&str; 3] = ["h1", "h2", "h4"];

/// The system unit the agent of h4 runs as.
const UNIT: &str = "flotilla-agent.service";

/// A TOML (and JSON) string.
fn q(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).expect("a string")
}

/// A word for `sh`, single-quoted.
fn sh_word(s: impl AsRef<str>) -> String {
    format!("'{}'", s.as_ref().replace('\'', "'\\''"))
}

/// A TCP port on the bridge address that was free when this returned.
fn free_bridge_port() -> u16 {
    std::net::TcpListener::bind((BRIDGE, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind the testnet bridge address (is the testnet up?)")
}

/// `cmd` run by `sh` on `host` over SSH: its stdout, trimmed; panics when it fails.
fn on(host: &TestHost, cmd: &str) -> String {
    let out = host.ssh(&[], cmd);
    assert!(
        out.status.success(),
        "`{cmd}` on {}: {}\n{}",
        host.name,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `path` as `host` can run it: the same path when the host sees it (plain hosts share
/// this machine's files; the systemd host has its own `/tmp`), else a copy in `dir`
/// (a directory of the host's own, which it sees at the same path).
fn runnable_on(host: &TestHost, path: &Path, dir: &Path) -> PathBuf {
    let p = path.to_string_lossy();
    if host.exec(&["test", "-x", &p]).status.success() {
        return path.to_path_buf();
    }
    std::fs::create_dir_all(dir).expect("mkdir bin");
    let copy = dir.join(path.file_name().expect("a file name"));
    std::fs::copy(path, &copy).expect("copy a binary where the host sees it");
    copy
}

/// `GET http://127.0.0.1:port/` run on `host`, from inside its namespaces: the pid
/// the stand-in service says it has (as the host numbers it), or why not.
fn pid_answering_on(host: &TestHost, port: u16) -> Result<u32, String> {
    let out = host.exec(&[
        "curl",
        "-sS",
        "-m",
        "5",
        &format!("http://127.0.0.1:{port}/"),
    ]);
    let body = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "curl on {}: {}",
            host.name,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| v["pid"].as_u64())
        .map(|p| p as u32)
        .ok_or_else(|| format!("not the stand-in service's answer: {body}"))
}

/// The component named `name` in a `status --json` answer (null when absent).
fn comp(status: &Value, name: &str) -> Value {
    status["components"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

fn running_and_observed(c: &Value) -> bool {
    c["lifecycle"] == "running" && c["observability"] == "observed"
}

fn measured_pid(c: &Value) -> Option<u32> {
    c["runtime_identity"]["measured"]["pid"]
        .as_u64()
        .map(|p| p as u32)
}

/// One host's agent: its home and state directory on the host, its log.
struct HostAgent {
    host: TestHost,
    /// This test's directory on the host (removed at the end).
    root: PathBuf,
    home: PathBuf,
    state: PathBuf,
    /// The agent's standard error (plain hosts; h4's goes to its journal).
    log: PathBuf,
    /// A plain host's agent process (`ip netns exec … flotilla agent run`).
    child: Option<(Child, KillOnDrop)>,
    /// Whether it runs as [`UNIT`] (the systemd host).
    unit: bool,
    /// The flotilla binary as the host runs it.
    flotilla: PathBuf,
}

impl HostAgent {
    fn new(host: &TestHost, test: &str) -> HostAgent {
        let root = host.home.join(test);
        let _ = std::fs::remove_dir_all(&root);
        let home = root.join("home");
        let state = root.join("state");
        std::fs::create_dir_all(&home).expect("mkdir the agent's home");
        std::fs::create_dir_all(&state).expect("mkdir the agent's state");
        let flotilla = runnable_on(
            host,
            Path::new(env!("CARGO_BIN_EXE_flotilla")),
            &root.join("bin"),
        );
        HostAgent {
            host: host.clone(),
            log: root.join("agent.log"),
            root,
            home,
            state,
            child: None,
            unit: false,
            flotilla,
        }
    }

    /// `flotilla ARGS` inside the plain host's network namespace, as the agent's user
    /// (its HOME and state directory).
    fn netns_command(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.host.netns])
            .arg(&self.flotilla)
            .args(args)
            .current_dir(&self.home)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("FLOTILLA_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// `FLOTILLA_STATE_DIR=… flotilla ARGS` on the host over SSH (its stdout; panics
    /// when it fails).
    fn over_ssh(&self, args: &[&str]) -> String {
        let words: Vec<String> = args.iter().map(sh_word).collect();
        on(
            &self.host,
            &format!(
                "cd {home} && HOME={home} FLOTILLA_STATE_DIR={state} NO_COLOR=1 {bin} {}",
                words.join(" "),
                home = sh_word(self.home.to_string_lossy()),
                state = sh_word(self.state.to_string_lossy()),
                bin = sh_word(self.flotilla.to_string_lossy()),
            ),
        )
    }

    /// `flotilla agent join URL TOKEN --ca-hash PIN` on the host: in its network
    /// namespace (plain hosts) or over SSH (the systemd host).
    fn join(&self, url: &str, token: &str, pin: &str) {
        let args = ["agent", "join", url, token, "--ca-hash", pin];
        if self.host.is_systemd() {
            let out = self.over_ssh(&args);
            assert!(out.contains("joined"), "{out}");
            return;
        }
        let out = self.netns_command(&args).output().expect("run agent join");
        assert!(
            out.status.success(),
            "agent join on {}: {}{}",
            self.host.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts the agent: a process in the plain host's namespace, or the unit
    /// `flotilla agent unit --systemd` prints, installed as a system unit on the
    /// systemd host.
    fn start(&mut self) {
        // Short intervals so the test is quick: the authority's deadline is 5 s.
        let tuning = [
            "--check-every",
            "250ms",
            "--report-every",
            "1s",
            "--wait",
            "10s",
            "--timeout",
            "30s",
        ];
        if self.host.is_systemd() {
            let printed = self.over_ssh(&[
                "--state-dir",
                &self.state.to_string_lossy(),
                "agent",
                "unit",
                "--systemd",
            ]);
            let unit = system_unit(&printed, &self.home, &tuning);
            let file = self.root.join(UNIT);
            std::fs::write(&file, &unit).expect("write the unit");
            remove_unit(&self.host);
            self.unit = true;
            on(
                &self.host,
                &format!(
                    "install -m 0644 {} /run/systemd/system/{UNIT} && systemctl daemon-reload && systemctl start {UNIT}",
                    sh_word(file.to_string_lossy())
                ),
            );
            return;
        }
        let log = std::fs::File::create(&self.log).expect("the agent's log");
        let mut args = vec!["agent", "run"];
        args.extend_from_slice(&tuning);
        let child = self
            .netns_command(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the agent");
        let guard = KillOnDrop(child.id());
        self.child = Some((child, guard));
    }

    /// What the agent logged (the unit's journal on the systemd host).
    fn log(&self) -> String {
        if self.unit {
            let out = self
                .host
                .ssh(&[], &format!("journalctl -u {UNIT} --no-pager -n 60"));
            return String::from_utf8_lossy(&out.stdout).into_owned();
        }
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `flotilla agent install --root <root>/install` on the host; from then on the
    /// agent runs as `<root>/install/current/flotilla` (what a self-update flips).
    fn install(&mut self) {
        let root = self.root.join("install");
        let root_arg = root.to_string_lossy().into_owned();
        let args = ["agent", "install", "--root", root_arg.as_str()];
        if self.host.is_systemd() {
            self.over_ssh(&args);
        } else {
            let out = self.netns_command(&args).output().expect("agent install");
            assert!(out.status.success(), "agent install: {out:?}");
        }
        self.flotilla = root.join("current").join("flotilla");
        assert!(
            self.flotilla.exists(),
            "{} installed",
            self.flotilla.display()
        );
    }

    /// Pins the release signing key `public` (`<state>/agent/trusted-keys/`).
    fn trust(&self, public: &Path) {
        let keys = self.state.join("agent").join("trusted-keys");
        std::fs::create_dir_all(&keys).expect("mkdir trusted-keys");
        std::fs::copy(public, keys.join("release.pub")).expect("copy the public key");
    }

    /// The pids (as this machine numbers them) of this host's `agent run` processes:
    /// its state directory is in their arguments (the unit) or environment.
    fn agent_pids(&self) -> Vec<u32> {
        let state = self.state.to_string_lossy().into_owned();
        let env = format!("FLOTILLA_STATE_DIR={state}");
        pids_with_arg("run")
            .into_iter()
            .filter(|&p| {
                let args = common::cmdline(p);
                args.iter().any(|a| a == "agent")
                    && (args.iter().any(|a| a == &state)
                        || std::fs::read(format!("/proc/{p}/environ"))
                            .map(|e| e.split(|&c| c == 0).any(|v| v == env.as_bytes()))
                            .unwrap_or(false))
            })
            .collect()
    }

    /// `sha256:<hex>` of the executable image of this host's one running agent,
    /// measured through `/proc/<pid>/exe` (None unless exactly one runs).
    fn measured(&self) -> Option<String> {
        match self.agent_pids().as_slice() {
            [pid] => flotilla_exec::identity::measure(*pid)
                .ok()
                .flatten()
                .map(|i| i.exe_sha256),
            _ => None,
        }
    }

    fn stop(&mut self) {
        if let Some((mut child, _guard)) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if !self.unit {
            // An agent a self-update started in its place is not our child.
            for p in self.agent_pids() {
                kill9(p);
            }
        }
        if self.unit {
            remove_unit(&self.host);
            self.unit = false;
        }
    }
}

/// The printed user unit adapted to a system unit under the host's PID 1: a system
/// service gets no `HOME` unless it names a `User=`, so it is given the agent's; and
/// `agent run` gets the test's short intervals. Everything else is as printed.
fn system_unit(printed: &str, home: &Path, tuning: &[&str]) -> String {
    let mut out = String::new();
    for line in printed.lines() {
        out.push_str(line);
        if line.starts_with("ExecStart=") {
            for t in tuning {
                out.push(' ');
                out.push_str(t);
            }
        }
        out.push('\n');
        if line == "[Service]" {
            out.push_str(&format!(
                "Environment={}\n",
                flotilla_agent::unit::systemd_word(&format!("HOME={}", home.display()))
            ));
        }
    }
    out
}

/// Stops, resets and removes [`UNIT`] on `host` (nothing when it is not there).
fn remove_unit(host: &TestHost) {
    let _ = host.ssh(
        &[],
        &format!(
            "systemctl stop {UNIT}; systemctl reset-failed {UNIT}; \
             rm -f /run/systemd/system/{UNIT}; systemctl daemon-reload"
        ),
    );
}

/// The authority, the agents and what they started; taken down on drop.
struct Fleet {
    /// The operator's workspace (inventory, authority directory, logs).
    dir: tempfile::TempDir,
    url: String,
    marker: String,
    authority: std::sync::Mutex<Option<(Child, KillOnDrop)>>,
    agents: Vec<HostAgent>,
}

impl Fleet {
    /// `flotilla serve init --san 10.213.77.1`, then `flotilla serve` on the bridge.
    fn start(test: &str) -> Fleet {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("https://{BRIDGE}:{}", free_bridge_port());
        let f = Fleet {
            dir,
            url,
            marker: format!("flt-{test}"),
            authority: std::sync::Mutex::new(None),
            agents: Vec::new(),
        };
        let init = f.run(&["serve", "init", "--san", BRIDGE]);
        assert_eq!(init.code, 0, "{init:?}");
        assert!(
            init.stdout.contains(BRIDGE),
            "the certificate names the bridge address: {}",
            init.stdout
        );
        let listen = f.url.trim_start_matches("https://").to_string();
        let log = std::fs::File::create(f.path().join("authority.log")).expect("a log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        cmd.args([
            "serve",
            "--listen",
            &listen,
            "--report-deadline",
            REPORT_DEADLINE,
        ])
        .current_dir(f.path())
        .env("FLOTILLA_STATE_DIR", f.path().join(".flotilla-state"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
        for (k, v) in f.env() {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start flotilla serve");
        let guard = KillOnDrop(child.id());
        *f.authority.lock().unwrap() = Some((child, guard));
        let mut last = None;
        assert!(
            wait_until(DEADLINE, || {
                let r = f.run(&["config", "history", "--json"]);
                let ok = r.code == 0;
                last = Some(r);
                ok
            }),
            "the authority never answered on {}: {last:?}\n{}",
            f.url,
            std::fs::read_to_string(f.path().join("authority.log")).unwrap_or_default()
        );
        f
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        let authority = self.path().join("authority");
        vec![
            ("FLOTILLA_AUTHORITY_DIR", authority.display().to_string()),
            ("FLOTILLA_SERVER", self.url.clone()),
            (
                "FLOTILLA_OPERATOR_FILE",
                authority.join("operator.json").display().to_string(),
            ),
        ]
    }

    /// The operator's `flotilla ARGS`, here.
    fn run(&self, args: &[&str]) -> Run {
        let env = self.env();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        run_with_env(self.path(), args, &env)
    }

    /// `flotilla status --server URL --json`: the fleet through the authority.
    fn status(&self) -> Value {
        let r = self.run(&["status", "--server", &self.url, "--json"]);
        serde_json::from_str(&r.stdout).unwrap_or_else(
            |_| serde_json::json!({ "failed": { "code": r.code, "stderr": r.stderr } }),
        )
    }

    /// `Ok` while the authority process runs; else how it ended.
    fn authority_running(&self) -> Result<(), String> {
        match self.authority.lock().unwrap().as_mut() {
            Some((child, _)) => match child.try_wait() {
                Ok(None) => Ok(()),
                Ok(Some(exit)) => Err(format!("pid {} ended: {exit}", child.id())),
                Err(e) => Err(format!("pid {}: {e}", child.id())),
            },
            None => Err("not started".into()),
        }
    }

    /// Every agent's log and the authority's, for a failure message.
    fn logs(&self) -> String {
        let state = match self.authority_running() {
            Ok(()) => "running".to_string(),
            Err(e) => e,
        };
        let mut s = format!(
            "authority ({state}) log:\n{}\n",
            std::fs::read_to_string(self.path().join("authority.log")).unwrap_or_default()
        );
        for a in &self.agents {
            s.push_str(&format!("agent {} log:\n{}\n", a.host.name, a.log()));
        }
        s
    }

    /// Waits until `cond` holds of `status --server --json`; panics saying `what`.
    fn wait_for(&self, what: &str, mut cond: impl FnMut(&Value) -> bool) -> Value {
        let mut last = Value::Null;
        if !wait_until(DEADLINE, || {
            last = self.status();
            cond(&last)
        }) {
            panic!(
                "timed out waiting for {what}\n{}\nlast status:\n{last:#}",
                self.logs()
            );
        }
        last
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // The agents first, so nothing is started again; then what they started.
        for a in self.agents.iter_mut() {
            a.stop();
        }
        for pid in pids_with_arg(&self.marker) {
            kill9(pid);
        }
        for a in &self.agents {
            let _ = std::fs::remove_dir_all(&a.root);
        }
    }
}

/// The inventory: hosts h1, h2, h4 driven by their agents, a stand-in service on each
/// (`(component, host, port, stand-in binary as the host runs it)`).
fn inventory(services: &[(String, String, u16, PathBuf)], marker: &str) -> String {
    let mut t = String::new();
    for h in HOSTS {
        t.push_str(&format!("[hosts.{h}]\ntransport = \"agent\"\n\n"));
    }
    for (name, host, port, kit) in services {
        t.push_str(&format!(
            "[components.{name}]\nhost = {}\n\
             command = [{}, \"--listen\", {}, \"--exec-name\", {}]\n\
             endpoints = {{ http = {} }}\n\
             readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"100ms\" }}\n\
             stop = {{ grace_period = \"2s\" }}\n\n",
            q(host),
            q(kit.to_string_lossy()),
            q(format!("127.0.0.1:{port}")),
            q(marker),
            q(format!("http://127.0.0.1:{port}")),
        ));
    }
    t
}

/// Three agents (one a systemd unit) bring up one service each through the authority;
/// h1 partitioned for 60 s is shown unreachable with its last-known state while its
/// component keeps running; when the link returns nothing on any host restarted.
#[test]
fn three_agents_one_under_systemd_survive_a_60s_partition_without_restarts() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let test = format!("fleet-hosts-{}", std::process::id());
    let mut fleet = Fleet::start(&test);

    // One agent per host, each with its own state, home and (for h4) binaries.
    for h in HOSTS {
        fleet.agents.push(HostAgent::new(net.host(h), &test));
    }
    let services: Vec<(String, String, u16, PathBuf)> = fleet
        .agents
        .iter()
        .map(|a| {
            let kit = runnable_on(&a.host, &flotilla_testkit::binary(), &a.root.join("bin"));
            (
                format!("web-{}", a.host.name),
                a.host.name.clone(),
                free_port(),
                kit,
            )
        })
        .collect();
    std::fs::write(
        fleet.path().join("flotilla.toml"),
        inventory(&services, &fleet.marker),
    )
    .expect("write the inventory");
    let p = fleet.run(&["-f", "flotilla.toml", "config", "publish", "--json"]);
    assert_eq!(p.code, 0, "{p:?}");

    // Each agent joins with its own one-time token, bound to its host.
    for a in &fleet.agents {
        let t = fleet.run(&["serve", "token", "create", "--host", &a.host.name, "--json"]);
        assert_eq!(t.code, 0, "{t:?}");
        let t = t.json();
        assert_eq!(t["host"], a.host.name.as_str(), "{t:#}");
        a.join(
            &fleet.url,
            t["token"].as_str().expect("a token"),
            t["ca_hash"].as_str().expect("a CA pin"),
        );
    }
    let began = Instant::now();
    for a in fleet.agents.iter_mut() {
        a.start();
    }
    let status = fleet.wait_for("all three components running and observed", |s| {
        services
            .iter()
            .all(|(name, ..)| running_and_observed(&comp(s, name)))
    });
    let converged = began.elapsed();

    // Each runs on its host, with the pid the authority reports: the service answers
    // on that host's loopback, from inside its namespaces, with that pid.
    let mut pids = Vec::new();
    for ((name, host, port, _), a) in services.iter().zip(&fleet.agents) {
        let c = comp(&status, name);
        assert_eq!(c["host"], host.as_str(), "{c:#}");
        assert_eq!(c["desired"], "running", "{c:#}");
        let pid = measured_pid(&c).unwrap_or_else(|| panic!("no measured pid: {c:#}"));
        assert_eq!(
            pid_answering_on(&a.host, *port),
            Ok(pid),
            "{name} on {host}"
        );
        if !a.host.is_systemd() {
            let ns = Command::new("ip")
                .args(["netns", "identify", &pid.to_string()])
                .output()
                .expect("ip netns identify");
            assert_eq!(
                String::from_utf8_lossy(&ns.stdout).trim(),
                a.host.netns,
                "pid {pid} of {name} runs in {host}'s network namespace"
            );
        }
        pids.push(pid);
    }
    // h4's agent is the unit, run by the host's systemd.
    let h4 = &fleet.agents[2];
    assert!(h4.host.is_systemd());
    let show = on(
        &h4.host,
        &format!("systemctl show -p ActiveState,MainPID {UNIT} | sort | tr '\\n' ' '"),
    );
    assert!(show.contains("ActiveState=active"), "{show}");
    let main_pid = show
        .split_whitespace()
        .find_map(|w| w.strip_prefix("MainPID="))
        .unwrap_or("0")
        .to_string();
    let args = on(
        &h4.host,
        &format!("tr '\\0' ' ' < /proc/{main_pid}/cmdline"),
    );
    assert!(
        args.contains(" agent run"),
        "the unit runs the agent: {args}"
    );

    // Partition h1 for 60 s: its component keeps running, the authority shows it
    // unreachable with its last-known state and age; h2 and h4 stay observed.
    let partition = net.partition("h1");
    let cut = Instant::now();
    let mut unreachable_after = None;
    let mut looks = 0;
    let mut last = Value::Null;
    while cut.elapsed() < PARTITION {
        let look = Instant::now();
        let s = fleet.status();
        let c1 = comp(&s, &services[0].0);
        if c1["observability"] == "unreachable" {
            assert_eq!(c1["last_known"]["lifecycle"], "running", "{c1:#}");
            unreachable_after.get_or_insert(cut.elapsed());
        } else {
            assert!(
                unreachable_after.is_none(),
                "h1 was unreachable and then observed while partitioned: {c1:#}"
            );
        }
        for (name, ..) in &services[1..] {
            let c = comp(&s, name);
            assert!(
                running_and_observed(&c),
                "after {:?} of h1's partition: {c:#}\n{}",
                cut.elapsed(),
                fleet.logs()
            );
        }
        assert_eq!(
            pid_answering_on(&fleet.agents[0].host, services[0].2),
            Ok(pids[0]),
            "h1's component keeps running while h1 is partitioned"
        );
        assert!(alive(pids[0]));
        last = s;
        looks += 1;
        // Look again every LOOK_EVERY (leaving the CPU to the agents and the
        // authority), or as soon as the partition's time is up.
        wait_until(LOOK_EVERY.saturating_sub(look.elapsed()), || {
            cut.elapsed() >= PARTITION
        });
    }
    let unreachable_after = unreachable_after.unwrap_or_else(|| {
        panic!(
            "h1 never shown unreachable during its {PARTITION:?} partition:\n{last:#}\n{}",
            fleet.logs()
        )
    });
    // Its age is the partition's, give or take the report interval and the deadline.
    let c1 = comp(&last, &services[0].0);
    let age_ms = last["observed_at_ms"].as_i64().unwrap_or(0)
        - c1["last_known"]["observed_at_ms"].as_i64().unwrap_or(0);
    assert!(
        age_ms >= (PARTITION - Duration::from_secs(10)).as_millis() as i64,
        "last known {age_ms} ms ago after a {PARTITION:?} partition: {c1:#}"
    );
    let text = fleet.run(&["status", "--server", &fleet.url]);
    assert_eq!(text.code, 1, "an unreachable host is not all ok: {text:?}");
    assert!(
        text.stdout.contains("unreachable (last: running,") && text.stdout.contains("s ago)"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("host h1: unreachable"),
        "{}",
        text.stdout
    );
    for h in ["h2", "h4"] {
        assert!(
            text.stdout.contains(&format!("host {h}: observed")),
            "{}",
            text.stdout
        );
    }

    // The link returns: h1 is observed again, and nothing restarted anywhere.
    drop(partition);
    let healed = Instant::now();
    let status = fleet.wait_for("h1 observed again after the partition", |s| {
        services
            .iter()
            .all(|(name, ..)| running_and_observed(&comp(s, name)))
    });
    let back_after = healed.elapsed();
    for (((name, host, port, _), a), before) in services.iter().zip(&fleet.agents).zip(&pids) {
        let c = comp(&status, name);
        assert_eq!(
            measured_pid(&c),
            Some(*before),
            "{name} on {host} was restarted: {c:#}"
        );
        assert_eq!(
            pid_answering_on(&a.host, *port),
            Ok(*before),
            "{name} on {host}"
        );
    }
    // The authority lived through its clients' broken connections.
    assert_eq!(fleet.authority_running(), Ok(()), "{}", fleet.logs());
    let text = fleet.run(&["status", "--server", &fleet.url]);
    for h in HOSTS {
        assert!(
            text.stdout
                .contains(&format!("host {h}: observed, last report ")),
            "{}",
            text.stdout
        );
    }
    assert!(!text.stdout.contains("unreachable"), "{}", text.stdout);
    eprintln!(
        "fleet_hosts: converged in {converged:?}; h1 unreachable {unreachable_after:?} into its \
         partition ({looks} looks over {PARTITION:?}); observed again {back_after:?} after the link returned"
    );
}

/// Hosts h1, h2, h4 driven by their agents, labelled by what supervises the agent.
fn release_inventory() -> String {
    let mut t = String::new();
    for h in HOSTS {
        let init = if h == "h4" { "systemd" } else { "none" };
        t.push_str(&format!(
            "[hosts.{h}]\ntransport = \"agent\"\nplatform = \"linux-x86_64\"\nlabels = {{ init = \"{init}\" }}\n\n"
        ));
    }
    t
}

impl Fleet {
    /// Writes `bytes` as the artifact of release `version` (serial `serial`), makes its
    /// manifest, signs it with `key` and publishes it; returns its `sha256:<hex>`.
    fn release(&self, key: &Path, version: &str, serial: u64, bytes: &[u8]) -> String {
        common::release::publish(
            |a| self.run(a),
            self.path(),
            "flotilla-agent",
            version,
            serial,
            "linux-x86_64",
            bytes,
            key.to_str().unwrap(),
        )
        .1
    }

    /// `release rollout flotilla-agent VERSION …` then `release approve`: its id.
    fn roll_out(&self, version: &str, selector: &str, min_healthy: &str, timeout: &str) -> u64 {
        let r = common::release::create_rollout(
            |a| self.run(a),
            "flotilla-agent",
            version,
            selector,
            2,
            min_healthy,
            timeout,
        );
        assert_eq!(r["phase"], "AwaitingApproval", "{r:#}");
        let id = r["id"].as_u64().expect("an id");
        let a = self.run(&["release", "approve", &id.to_string()]);
        assert_eq!(a.code, 0, "{a:?}");
        id
    }

    fn rollout(&self, id: u64) -> Value {
        let r = self.run(&["release", "status", &id.to_string(), "--json"]);
        serde_json::from_str(&r.stdout).unwrap_or(Value::Null)
    }

    /// Waits until rollout `id` is in `phase` with every host settled; returns it.
    fn wait_rollout(&self, id: u64, phase: &str) -> Value {
        let mut last = Value::Null;
        if !wait_until(Duration::from_secs(120), || {
            last = self.rollout(id);
            last["phase"] == phase
                && last["hosts"]
                    .as_array()
                    .is_some_and(|h| h.iter().all(|h| h["phase"] != "Updating"))
        }) {
            panic!(
                "timed out waiting for rollout {id} to be {phase}:\n{last:#}\n{}",
                self.logs()
            );
        }
        last
    }
}

fn rollout_host<'a>(r: &'a Value, host: &str) -> &'a Value {
    r["hosts"]
        .as_array()
        .and_then(|h| h.iter().find(|h| h["host"] == host))
        .unwrap_or(&Value::Null)
}

/// The whole rollout, on real agents (h4's under its real systemd): a signed
/// release of a new agent build reaches all three hosts canary first, after approval,
/// each proven by the digest measured from its running agent; a build that exits at
/// once (on the systemd host), one that crash-loops after 5 s and one that never
/// reports each halt their rollout after the canary, which is back on the previous
/// version (measured) within 30 s, and no other host was touched.
#[test]
fn signed_releases_roll_out_to_three_hosts_and_bad_builds_roll_back_on_the_canary() {
    let _serial = testnet::lock();
    let net = Testnet::get();
    let test = format!("release-hosts-{}", std::process::id());
    let mut fleet = Fleet::start(&test);
    std::fs::write(fleet.path().join("flotilla.toml"), release_inventory()).unwrap();
    let p = fleet.run(&["-f", "flotilla.toml", "config", "publish"]);
    assert_eq!(p.code, 0, "{p:?}");
    let k = fleet.run(&["release", "keygen", "--dir", "keys", "--name", "release"]);
    assert_eq!(k.code, 0, "{k:?}");
    let key = fleet.path().join("keys/release.key");
    let public = fleet.path().join("keys/release.pub");
    for h in HOSTS {
        let mut a = HostAgent::new(net.host(h), &test);
        a.install();
        a.trust(&public);
        fleet.agents.push(a);
    }
    for a in &fleet.agents {
        let t = fleet.run(&["serve", "token", "create", "--host", &a.host.name, "--json"]);
        assert_eq!(t.code, 0, "{t:?}");
        let t = t.json();
        a.join(
            &fleet.url,
            t["token"].as_str().unwrap(),
            t["ca_hash"].as_str().unwrap(),
        );
    }
    for a in fleet.agents.iter_mut() {
        a.start();
    }
    let installed: Vec<String> = {
        let mut v = Vec::new();
        for a in &fleet.agents {
            let mut m = None;
            assert!(
                wait_until(DEADLINE, || {
                    m = a.measured();
                    m.is_some() && a.state.join("agent/reported.json").exists()
                }),
                "agent on {} never ran and reported\n{}",
                a.host.name,
                fleet.logs()
            );
            v.push(m.unwrap());
        }
        v
    };

    // A good new build everywhere: canary first, each proven by measured digest.
    let mut good = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    good.extend_from_slice(b"\nflotilla-release-hosts-test: 2.0.0\n");
    let good_sha = fleet.release(&key, "2.0.0", 2, &good);
    assert!(!installed.contains(&good_sha));
    let approved = Instant::now();
    let id = fleet.roll_out("2.0.0", "", "3s", "90s");
    let r = fleet.wait_rollout(id, "Succeeded");
    let all_updated = approved.elapsed();
    let events: Vec<&str> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    let canary = r["hosts"][0]["host"].as_str().unwrap();
    let canary_updated = events
        .iter()
        .position(|e| e.starts_with(&format!("{canary}: Updated")))
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert!(
        events
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.starts_with(canary) && e.contains(": Updating"))
            .all(|(i, _)| i > canary_updated),
        "canary first: {events:#?}"
    );
    for a in &fleet.agents {
        assert_eq!(rollout_host(&r, &a.host.name)["phase"], "Updated", "{r:#}");
        assert_eq!(
            a.measured().as_deref(),
            Some(good_sha.as_str()),
            "{}'s running agent",
            a.host.name
        );
    }
    let h4 = &fleet.agents[2];
    let active = on(&h4.host, &format!("systemctl is-active {UNIT}"));
    assert_eq!(active, "active", "h4's agent still runs as its unit");

    // Bad builds: each halts after its canary, which is back on 2.0.0, measured.
    // (version, serial, artifact, selector, min healthy, timeout, the canary)
    type Case<'a> = (&'a str, u64, &'a [u8], &'a str, &'a str, &'a str, &'a str);
    let cases: [Case; 3] = [
        // On the systemd host alone: systemd restarts it until its start limit.
        (
            "3.0.0",
            3,
            b"#!/bin/sh\necho this build exits at once >&2\nexit 3\n",
            "init=systemd",
            "3s",
            "60s",
            "h4",
        ),
        (
            "4.0.0",
            4,
            b"#!/bin/sh\nsleep 5\necho crashed >&2\nexit 1\n",
            "",
            "10s",
            "60s",
            "h1",
        ),
        (
            "5.0.0",
            5,
            b"#!/bin/sh\nexec sleep 3600\n",
            "",
            "3s",
            "15s",
            "h1",
        ),
    ];
    let mut timings = Vec::new();
    for (version, serial, bytes, selector, soak, timeout, canary) in cases {
        let before: Vec<Option<String>> = fleet.agents.iter().map(|a| a.measured()).collect();
        fleet.release(&key, version, serial, bytes);
        let id = fleet.roll_out(version, selector, soak, timeout);
        let r = fleet.wait_rollout(id, "Failed");
        let detected = Instant::now();
        let c = rollout_host(&r, canary);
        assert_eq!(c["canary"], true, "{r:#}");
        assert_eq!(c["phase"], "RolledBack", "{version}: {r:#}");
        assert!(r["halted"].is_string(), "{r:#}");
        let a = fleet.agents.iter().find(|a| a.host.name == canary).unwrap();
        assert!(
            wait_until(Duration::from_secs(30), || a.measured().as_deref()
                == Some(good_sha.as_str())),
            "{version}: {canary} not back on 2.0.0 within 30 s: {:?}\n{}",
            a.measured(),
            fleet.logs()
        );
        timings.push((version, c["reason"].clone(), detected.elapsed()));
        for (a, was) in fleet.agents.iter().zip(&before) {
            if a.host.name != canary {
                assert_ne!(rollout_host(&r, &a.host.name)["phase"], "Updating");
                assert_eq!(&a.measured(), was, "{version}: {} was touched", a.host.name);
            }
        }
    }
    eprintln!("release_hosts: approve → all three Updated in {all_updated:?} (soak 3 s per wave); rollbacks: {timings:?}");
}
