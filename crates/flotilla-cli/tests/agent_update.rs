//! Agent self-update with real processes: `flotilla agent install` makes an install
//! root, an agent runs from it (by hand, or as a job of the fake launchd), a new build
//! is staged and `update.json` written as the updater writes it, and the real watchdog
//! (`flotilla agent update-watch`) takes it from there.
//!
//! What is proven: a good build (this `flotilla` with bytes appended: another digest,
//! still runs) is flipped, restarted, proven by the measured digest of a new pid that
//! reported, soaked, and `Updated`; bad builds (`#!/bin/sh` scripts: one that exits at
//! once, one that crashes after 5 s, one that never reports) end `RolledBack` with the
//! right reason, the previous version proven running again by its measured digest,
//! `current` pointing back, and the bad version on the skip list; `kill -9` of the
//! agent before the flip and during the soak, and of the agent and the watchdog both
//! (an agent started again resumes the update), leave the host on one version, running,
//! and `update.json` says which; on the fake launchd, `kickstart -k` of a job bootstrapped
//! with a versioned path restarts the old binary and ends `RestartHadNoEffect` (never
//! success), while a job that runs `<root>/current/flotilla` is updated through it.
//! End to end with a real authority: a release signed with a key the agent pins,
//! published with its blob, rolled out and approved, is applied by an agent joined to
//! the authority (rollout `Succeeded`, the host `Updated` with the measured digest); a
//! release whose binary exits at once halts the rollout with the host `RolledBack`
//! (`CrashLoop`) and the agent back on its version; an agent killed with `kill -9`
//! during the download stays on its version, and once started again applies the
//! release. Under the real systemd of the systemd test host: a unit running
//! `<root>/current/flotilla` is updated through `systemctl restart`, with the watchdog
//! in a transient unit of its own; a unit pointed at a versioned (stale) path is
//! `RestartHadNoEffect` and rolled back.

mod common;

use common::release::{good_build, run_program as run};

use common::authority::Authority;
use flotilla_agent::update::{OldAgent, Side, Step, Trial, UpdateRecord, UPDATE_FORMAT};
use flotilla_release::{InstallRoot, Reason, UpdateState, VersionDir};
use flotilla_testkit::{alive, wait_until};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long any one condition may take; tests move on as soon as it holds.
const DEADLINE: Duration = Duration::from_secs(60);

/// A host: an install root with this `flotilla` installed, a state directory, an
/// (empty) inventory.
struct Host {
    dir: tempfile::TempDir,
    root: InstallRoot,
    state: PathBuf,
    /// The installed version's directory and digest.
    old: (VersionDir, String),
}

impl Host {
    fn new() -> Host {
        Host::new_in(&std::env::temp_dir())
    }

    /// [`Host::new`] in a temporary directory below `parent`.
    fn new_in(parent: &Path) -> Host {
        let dir = tempfile::tempdir_in(parent).expect("temp dir");
        std::fs::write(dir.path().join("flotilla.toml"), "").unwrap();
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
        let cur = root.current().expect("installed as current");
        let sha = flotilla_release::artifact::sha256_file(&cur.binary).unwrap();
        Host {
            dir,
            root,
            state,
            old: (cur, sha),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `<root>/current/flotilla`.
    fn current_binary(&self) -> PathBuf {
        self.root.root().join("current/flotilla")
    }

    /// The `agent run` arguments (no supervisor: run by hand).
    fn agent_args(&self) -> Vec<String> {
        [
            "agent",
            "run",
            "--inventory",
            &self.path().join("flotilla.toml").display().to_string(),
            "--state-dir",
            &self.state.display().to_string(),
            "--supervisor",
            "none",
            "--poll",
            "200ms",
            "--check-every",
            "500ms",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// Starts the agent by hand from `<root>/current/flotilla`; waits until it reported
    /// (reported.json names it). Its pid.
    fn start_agent(&self) -> u32 {
        self.start_agent_with(&self.agent_args())
    }

    /// [`Host::start_agent`] with these arguments.
    fn start_agent_with(&self, args: &[String]) -> u32 {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join("hand-agent.log"))
            .unwrap();
        let child = Command::new(self.current_binary())
            .args(args)
            .current_dir(self.path())
            .env("HOME", self.path())
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_SERVER")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the agent");
        let pid = child.id();
        reap(child);
        self.wait(&format!("agent pid {pid} to report"), || {
            self.reported().is_some_and(|r| r["pid"] == pid)
        });
        pid
    }

    fn agent_file(&self, name: &str) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.state.join("agent").join(name)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn reported(&self) -> Option<serde_json::Value> {
        self.agent_file("reported.json")
    }

    fn record(&self) -> Option<UpdateRecord> {
        UpdateRecord::load(&self.root).ok().flatten()
    }

    /// Everything this host's processes wrote, for failure messages.
    fn logs(&self) -> String {
        let mut out = String::new();
        for (name, path) in [
            ("hand-started agent", self.path().join("hand-agent.log")),
            ("agent.log", self.state.join("agent/agent.log")),
            (
                "update-watch.log",
                self.state.join("agent/update-watch.log"),
            ),
            ("watchdog", self.path().join("watch.log")),
            ("launchd job", self.path().join("job.log")),
        ] {
            if let Ok(t) = std::fs::read_to_string(path) {
                out.push_str(&format!("--- {name}:\n{t}\n"));
            }
        }
        if let Some(r) = self.record() {
            out.push_str(&format!(
                "--- update.json:\n{}\n",
                serde_json::to_string_pretty(&r).unwrap()
            ));
        }
        out
    }

    fn wait(&self, what: &str, cond: impl FnMut() -> bool) {
        if !wait_until(DEADLINE, cond) {
            panic!("timed out waiting for {what}\n{}", self.logs());
        }
    }

    /// Stages `bytes` as `version`; its directory and digest.
    fn stage(&self, version: &str, bytes: &[u8]) -> (VersionDir, String) {
        let (mut f, tmp) = self.root.temp_download().unwrap();
        std::io::Write::write_all(&mut f, bytes).unwrap();
        drop(f);
        let sha = flotilla_release::artifact::sha256_file(&tmp).unwrap();
        let v = self.root.stage(version, &sha, &tmp).unwrap();
        (v, sha)
    }

    /// Writes `update.json` as the updater does once it staged `to` for the agent `pid`.
    fn write_update(
        &self,
        to: &(VersionDir, String),
        pid: u32,
        supervisor: &str,
        min_healthy_ms: u64,
        timeout_ms: u64,
    ) {
        let id = flotilla_exec::identity::measure(pid)
            .unwrap()
            .expect("the agent runs");
        assert_eq!(
            id.exe_sha256,
            format!("sha256:{}", self.old.1),
            "the agent runs the installed version"
        );
        let now = now_ms();
        let mut rec = UpdateRecord {
            format: UPDATE_FORMAT,
            rollout: 1,
            name: "flotilla-agent".into(),
            version: to.0.version.clone(),
            serial: 1,
            key_id: "0123456789ABCDEF".into(),
            sha256: to.1.clone(),
            from: Some(Side::of(&self.old.0, &self.old.1)),
            to: Some(Side::of(&to.0, &to.1)),
            state: UpdateState::Staged,
            step: Step::Staged,
            min_healthy_ms,
            timeout_ms,
            started_ms: now,
            updated_ms: now,
            attempts: Vec::new(),
            reason: None,
            detail: String::new(),
            evidence: Vec::new(),
            agent: Some(OldAgent {
                pid,
                start_time_ticks: id.start_time_ticks,
                exe_sha256: id.exe_sha256.clone(),
                argv: common::cmdline(pid),
                cwd: std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
            }),
            supervisor: supervisor.into(),
            seen: Vec::new(),
            rollbacks: 0,
        };
        rec.save(&self.root).unwrap();
    }

    /// Starts the watchdog from the old version's binary, as the updater does.
    fn start_watch(&self, supervisor: &str, env: &[(&str, String)]) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path().join("watch.log"))
            .unwrap();
        let mut cmd = Command::new(&self.old.0.binary);
        cmd.args([
            "agent",
            "update-watch",
            "--root",
            self.root.root().to_str().unwrap(),
            "--state-dir",
            self.state.to_str().unwrap(),
            "--supervisor",
            supervisor,
        ])
        .current_dir(self.path())
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().expect("start update-watch")
    }

    /// Runs the watchdog to its end; the final record.
    fn watch(&self, supervisor: &str, env: &[(&str, String)]) -> UpdateRecord {
        let mut w = self.start_watch(supervisor, env);
        let mut status = None;
        self.wait("the watchdog to finish", || {
            status = w.try_wait().unwrap();
            status.is_some()
        });
        assert!(
            status.unwrap().success(),
            "update-watch failed\n{}",
            self.logs()
        );
        self.record().expect("update.json")
    }

    /// The agent running now (what running.json names, alive), measured.
    fn running_agent(&self) -> flotilla_exec::identity::RuntimeIdentity {
        let mut found = None;
        self.wait("a running agent", || {
            found = self
                .agent_file("running.json")
                .and_then(|r| r["pid"].as_u64())
                .and_then(|p| flotilla_exec::identity::measure(p as u32).ok().flatten());
            found.is_some()
        });
        found.unwrap()
    }

    /// Starts the agent by hand, stages a good build (tagged `tag`) as version 0.2.0,
    /// starts the watchdog on it and waits until it soaks: the watchdog's pid, the pid
    /// of the new agent it proved, and the staged version with its digest.
    fn soaking_update(&self, tag: &str) -> (u32, u32, (VersionDir, String)) {
        let pid = self.start_agent();
        let new = self.stage("0.2.0", &good_build(tag));
        self.write_update(&new, pid, "none", 2000, 30_000);
        let w = self.start_watch("none", &[]);
        let w_pid = w.id();
        reap(w);
        let mut soaking = None;
        self.wait("the soak", || {
            soaking = match self.record().map(|r| r.step) {
                Some(Step::Soaking { pid, .. }) => Some(pid),
                _ => None,
            };
            soaking.is_some()
        });
        (w_pid, soaking.expect("soaking"), new)
    }

    fn current_name(&self) -> String {
        self.root.current().map(|v| v.name()).unwrap_or_default()
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        // Every agent and watchdog of this host names its state directory.
        for _ in 0..3 {
            for pid in common::pids_with_arg(self.state.to_str().unwrap()) {
                common::kill9(pid);
            }
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Reaps `child` whenever it ends (it is not waited for otherwise).
fn reap(mut child: Child) {
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

/// Asserts the update ended `RolledBack` for `reason`, the old version proven back
/// and running, `current` pointing at it, the bad version skipped.
fn assert_rolled_back(h: &Host, rec: &UpdateRecord, reason: Reason, bad: &(VersionDir, String)) {
    assert_eq!(rec.state, UpdateState::RolledBack, "{}", h.logs());
    assert_eq!(rec.step, Step::Done);
    assert_eq!(rec.reason, Some(reason), "{}", h.logs());
    assert!(
        rec.evidence
            .iter()
            .any(|e| e.contains("rolled back: pid") && e.contains(&h.old.1)),
        "the old digest is proven back: {:#?}",
        rec.evidence
    );
    assert_eq!(h.current_name(), h.old.0.name());
    let running = h.running_agent();
    assert_eq!(running.exe_sha256, format!("sha256:{}", h.old.1));
    let skipped = h.root.skipped(&bad.1).unwrap().expect("on the skip list");
    assert_eq!(skipped.version, bad.0.version);
    assert_eq!(skipped.reason, reason);
}

#[test]
fn install_uninstall_and_the_unit_runs_current() {
    let h = Host::new();
    // The installed binary is this one, byte for byte, and current.
    assert_eq!(
        h.old.1,
        flotilla_release::artifact::sha256_file(Path::new(env!("CARGO_BIN_EXE_flotilla"))).unwrap()
    );
    assert!(h.old.0.dir.starts_with(h.root.root().join("versions")));
    // Its unit runs <root>/current/flotilla, so that a flip takes effect at restart.
    let (code, unit, err) = run(
        &h.current_binary(),
        h.path(),
        &["agent", "unit", "--inventory", "flotilla.toml", "--systemd"],
        &h.state,
    );
    assert_eq!(code, 0, "{err}");
    let exec = unit
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap()
        .to_string();
    assert!(
        exec.starts_with(&format!(
            "ExecStart={} agent run",
            h.current_binary().display()
        )),
        "{exec}"
    );
    // Uninstall removes the root and keeps the state, unless --purge.
    std::fs::create_dir_all(h.state.join("agent")).unwrap();
    std::fs::write(h.state.join("agent/status.json"), "{}").unwrap();
    let root = h.root.root().to_str().unwrap();
    let (code, out, err) = run(
        Path::new(env!("CARGO_BIN_EXE_flotilla")),
        h.path(),
        &["agent", "uninstall", "--root", root],
        &h.state,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!h.root.root().exists(), "{out}");
    assert!(h.state.join("agent/status.json").exists());
    let (code, out, err) = run(
        Path::new(env!("CARGO_BIN_EXE_flotilla")),
        h.path(),
        &["agent", "uninstall", "--root", root, "--purge"],
        &h.state,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!h.state.join("agent").exists(), "{out}");
}

#[test]
fn a_good_build_is_flipped_restarted_proven_soaked_and_updated() {
    let h = Host::new();
    let pid = h.start_agent();
    let new = h.stage("0.2.0", &good_build("good"));
    h.write_update(&new, pid, "none", 1000, 30_000);
    let rec = h.watch("none", &[]);
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    assert_eq!(rec.reason, None);
    // The new agent: a new pid, measured running the artifact, which reported.
    let running = h.running_agent();
    assert_ne!(running.pid, pid);
    assert_eq!(running.exe_sha256, format!("sha256:{}", new.1));
    assert_eq!(h.reported().unwrap()["pid"], running.pid);
    assert!(!alive(pid), "the old agent was stopped");
    assert_eq!(h.current_name(), new.0.name());
    assert_eq!(h.root.previous().unwrap().name(), h.old.0.name());
    assert!(
        rec.evidence.iter().any(|e| e.contains("the artifact's")),
        "{:#?}",
        rec.evidence
    );
    // It was started with the old agent's arguments.
    assert_eq!(common::cmdline(running.pid)[1..], h.agent_args()[..]);
}

#[test]
fn a_build_that_exits_at_once_is_a_crash_loop_and_rolled_back() {
    let h = Host::new();
    let pid = h.start_agent();
    let bad = h.stage("0.2.0-exits", b"#!/bin/sh\nexit 1\n");
    h.write_update(&bad, pid, "none", 1000, 30_000);
    let rec = h.watch("none", &[]);
    assert_rolled_back(&h, &rec, Reason::CrashLoop, &bad);
    assert!(rec.seen.len() > 2, "{:#?}", rec.seen);
}

#[test]
fn a_build_that_never_reports_times_out_and_is_rolled_back() {
    let h = Host::new();
    let pid = h.start_agent();
    let bad = h.stage("0.2.0-silent", b"#!/bin/sh\nexec sleep 3600\n");
    h.write_update(&bad, pid, "none", 1000, 3_000);
    let rec = h.watch("none", &[]);
    assert_rolled_back(&h, &rec, Reason::HealthTimeout, &bad);
    // What ran instead was stopped.
    for s in &rec.seen {
        if s.exe_sha256 != format!("sha256:{}", h.old.1) {
            assert!(!alive(s.pid), "pid {} still runs", s.pid);
        }
    }
}

#[test]
fn a_build_that_crashes_after_5s_is_a_crash_loop_and_rolled_back() {
    let h = Host::new();
    let pid = h.start_agent();
    let bad = h.stage("0.2.0-crashes", b"#!/bin/sh\nsleep 5\nexit 1\n");
    h.write_update(&bad, pid, "none", 1000, 40_000);
    let rec = h.watch("none", &[]);
    assert_rolled_back(&h, &rec, Reason::CrashLoop, &bad);
}

#[test]
fn kill_9_of_the_agent_before_the_flip_and_during_the_soak_ends_updated() {
    let h = Host::new();
    let pid = h.start_agent();
    let new = h.stage("0.2.0", &good_build("soak"));
    h.write_update(&new, pid, "none", 3000, 30_000);
    // Killed after staging, before the watchdog flips: nothing to stop, it starts the new one.
    common::kill9(pid);
    let mut w = h.start_watch("none", &[]);
    let mut soaking = None;
    h.wait("the soak", || {
        soaking = match h.record().map(|r| r.step) {
            Some(Step::Soaking { pid, .. }) => Some(pid),
            _ => None,
        };
        soaking.is_some()
    });
    let first = soaking.unwrap();
    common::kill9(first);
    h.wait("the watchdog to finish", || w.try_wait().unwrap().is_some());
    let rec = h.record().unwrap();
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    let running = h.running_agent();
    assert_ne!(running.pid, first);
    assert_eq!(running.exe_sha256, format!("sha256:{}", new.1));
    assert!(
        rec.evidence.iter().any(|e| e.contains("into the soak")),
        "{:#?}",
        rec.evidence
    );
    assert_eq!(rec.seen.len(), 2, "{:#?}", rec.seen);
}

#[test]
fn after_a_power_cut_at_staging_the_agent_started_again_is_the_one_restarted() {
    let h = Host::new();
    let pid = h.start_agent();
    let new = h.stage("0.2.0", &good_build("cut-staged"));
    h.write_update(&new, pid, "none", 1000, 30_000);
    // Everything dies before a watchdog ran; the agent is started again (as a
    // supervisor would), finds the update and starts the watchdog, which must restart
    // this agent, not the one recorded at staging.
    common::kill9(pid);
    h.wait("the agent to die", || !alive(pid));
    let again = h.start_agent();
    h.wait("the update to end", || {
        h.record().is_some_and(|r| r.step == Step::Done)
    });
    let rec = h.record().unwrap();
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    assert!(
        rec.evidence
            .iter()
            .any(|e| e.contains(&format!("pid {again} (start"))),
        "{:#?}",
        rec.evidence
    );
    let running = h.running_agent();
    assert_ne!(running.pid, again);
    assert_eq!(running.exe_sha256, format!("sha256:{}", new.1));
    assert!(h.root.skip_list().unwrap().is_empty());
}

#[test]
fn an_agent_logging_json_has_its_watchdog_and_the_agent_it_restarts_log_json() {
    let h = Host::new();
    let mut args = h.agent_args();
    args.extend(["--log-format".to_string(), "json".to_string()]);
    let pid = h.start_agent_with(&args);
    let new = h.stage("0.2.0", &good_build("json-logs"));
    h.write_update(&new, pid, "none", 1000, 30_000);
    // The agent finds the staged update without a watchdog and starts one itself.
    h.wait("the update to end", || {
        h.record().is_some_and(|r| r.step == Step::Done)
    });
    assert_eq!(
        h.record().unwrap().state,
        UpdateState::Updated,
        "{}",
        h.logs()
    );
    for file in ["update-watch.log", "agent.log"] {
        let text = std::fs::read_to_string(h.state.join("agent").join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}\n{}", h.logs()));
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{file} is empty");
        for l in lines {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("{file}: not JSON ({e}): {l}"));
            assert!(v["level"].is_string(), "{file}: {l}");
        }
    }
}

#[test]
fn an_agent_started_after_its_watchdog_died_resumes_the_update() {
    let h = Host::new();
    let (w_pid, soaking, new) = h.soaking_update("resume");
    // The watchdog and the agent it proved both die mid-soak.
    common::kill9(w_pid);
    common::kill9(soaking);
    h.wait("the watchdog to die", || !alive(w_pid));
    // An agent started again (the new version: current) finds the update unfinished
    // and its lock free, and starts a watchdog that carries it to its end.
    let again = h.start_agent();
    h.wait("the resumed update to finish", || {
        h.record().is_some_and(|r| r.step == Step::Done)
    });
    let rec = h.record().unwrap();
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    let running = h.running_agent();
    assert_eq!(running.pid, again);
    assert_eq!(running.exe_sha256, format!("sha256:{}", new.1));
}

/// The fake launchd (`flotilla-testkit`'s `fake-launchctl`), installed as
/// `<dir>/bin/launchctl`.
fn fake_launchctl(dir: &Path) -> PathBuf {
    let fake = flotilla_testkit::binary().with_file_name("fake-launchctl");
    if !fake.exists() {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "-p", "flotilla-testkit", "--bin", "fake-launchctl"])
            .status()
            .expect("build fake-launchctl");
        assert!(status.success());
    }
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("launchctl");
    std::os::unix::fs::symlink(&fake, &link).unwrap();
    link
}

/// A job of the fake launchd, booted out when dropped.
struct Job {
    env: Vec<(&'static str, String)>,
    label: String,
}

impl Drop for Job {
    fn drop(&mut self) {
        bootout(&self.env, &self.label);
    }
}

/// A launchd job running the agent of `h`, its program `program`.
fn launchd_job(h: &Host, program: &Path) -> Job {
    let launchctl = fake_launchctl(h.path());
    let label = format!("dev.flotilla.update.{}", std::process::id());
    let env = vec![
        ("FLOTILLA_LAUNCHCTL", launchctl.display().to_string()),
        (
            "FAKE_LAUNCHD_DIR",
            h.path().join("launchd").display().to_string(),
        ),
        ("FAKE_LAUNCHD_EXIT_TIMEOUT_MS", "5000".to_string()),
        ("FAKE_LAUNCHD_THROTTLE_MS", "200".to_string()),
    ];
    // `agent unit --launchd` from the installed binary, then the program set.
    let (code, plist, err) = run(
        &h.current_binary(),
        h.path(),
        &[
            "--state-dir",
            h.state.to_str().unwrap(),
            "agent",
            "unit",
            "--inventory",
            "flotilla.toml",
            "--launchd",
        ],
        &h.state,
    );
    assert_eq!(code, 0, "{err}");
    let current = format!("<string>{}</string>", h.current_binary().display());
    assert!(plist.contains(&current), "{plist}");
    let plist = plist
        .replace(&current, &format!("<string>{}</string>", program.display()))
        .replace("dev.flotilla.agent", &label)
        .replace(
            &h.state.join("agent/agent.log").display().to_string(),
            &h.path().join("job.log").display().to_string(),
        );
    let path = h.path().join(format!("{label}.plist"));
    std::fs::write(&path, plist).unwrap();
    let out = Command::new(&launchctl)
        .args(["bootstrap", "system", path.to_str().unwrap()])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    Job { env, label }
}

fn launchd_pid(env: &[(&'static str, String)], label: &str) -> Option<u32> {
    let out = Command::new(&env[0].1)
        .args(["print", &format!("system/{label}")])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .ok()?;
    flotilla_exec::launchctl::parse_print(&String::from_utf8_lossy(&out.stdout)).pid
}

fn bootout(env: &[(&'static str, String)], label: &str) {
    let _ = Command::new(&env[0].1)
        .args(["bootout", &format!("system/{label}")])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output();
}

#[test]
fn launchd_kickstart_of_a_cached_versioned_path_is_restart_had_no_effect() {
    let h = Host::new();
    // The job was bootstrapped with the versioned path: launchd caches it, and
    // `kickstart -k` runs it again whatever `current` says.
    let job = launchd_job(&h, &h.old.0.binary);
    let (env, label) = (&job.env, &job.label);
    let mut pid = None;
    h.wait("the job's agent to report", || {
        pid = launchd_pid(env, label);
        pid.is_some_and(|p| h.reported().is_some_and(|r| r["pid"] == p))
    });
    let new = h.stage("0.2.0", &good_build("launchd-trap"));
    let supervisor = format!("launchd:system/{label}");
    h.write_update(&new, pid.unwrap(), &supervisor, 1000, 20_000);
    let rec = h.watch(&supervisor, env);
    assert_rolled_back(&h, &rec, Reason::RestartHadNoEffect, &new);
    assert!(
        rec.attempts.iter().any(|a| a.what.contains("kickstart -k")),
        "{:#?}",
        rec.attempts
    );
}

#[test]
fn launchd_job_running_current_is_updated_through_kickstart() {
    let h = Host::new();
    let job = launchd_job(&h, &h.current_binary());
    let (env, label) = (&job.env, &job.label);
    let mut pid = None;
    h.wait("the job's agent to report", || {
        pid = launchd_pid(env, label);
        pid.is_some_and(|p| h.reported().is_some_and(|r| r["pid"] == p))
    });
    let new = h.stage("0.2.0", &good_build("launchd"));
    let supervisor = format!("launchd:system/{label}");
    h.write_update(&new, pid.unwrap(), &supervisor, 1000, 20_000);
    let rec = h.watch(&supervisor, env);
    let now = launchd_pid(env, label);
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    let now = now.expect("the job runs");
    assert_ne!(Some(now), pid);
    assert_eq!(h.reported().unwrap()["pid"], now);
    assert_eq!(
        h.reported().unwrap()["exe_sha256"],
        format!("sha256:{}", new.1)
    );
}

/// An authority with one agent host, `edge`, and this host's agent joined to it,
/// pinning a fresh release key, running from its install root (no supervisor).
struct Fleet {
    a: Authority,
    h: Host,
    secret: String,
    client: flotilla_api::Client,
    rt: tokio::runtime::Runtime,
    /// The agent's arguments, and its pid.
    args: Vec<String>,
    pid: u32,
}

impl Fleet {
    fn new() -> Fleet {
        let a = Authority::new("[hosts.edge]\ntransport = \"agent\"\n");
        let p = a.publish(&[]);
        assert_eq!(p.code, 0, "{p:?}");
        let h = Host::new();
        let t = a.run(&["serve", "token", "create", "--host", "edge", "--json"]);
        assert_eq!(t.code, 0, "{t:?}");
        let t = t.json();
        let (code, out, err) = run(
            &h.current_binary(),
            h.path(),
            &[
                "agent",
                "join",
                &a.url,
                t["token"].as_str().unwrap(),
                "--ca-hash",
                t["ca_hash"].as_str().unwrap(),
            ],
            &h.state,
        );
        assert_eq!(code, 0, "{out}{err}");
        let k = flotilla_release::keygen(h.path(), "release", false).unwrap();
        let args: Vec<String> = [
            "agent",
            "run",
            "--state-dir",
            h.state.to_str().unwrap(),
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
        let pid = h.start_agent_with(&args);
        let op =
            flotilla_server::authority::OperatorFile::read(&a.dir.join("operator.json")).unwrap();
        let client = flotilla_api::Client::new(&a.url, &op.ca_pem, Some(op.credential)).unwrap();
        Fleet {
            secret: std::fs::read_to_string(&k.secret_path).unwrap(),
            a,
            h,
            client,
            rt: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            args,
            pid,
        }
    }

    /// Publishes `bytes` as flotilla-agent `version` (blob and signed manifest), rolls
    /// it out to every agent host and approves it; the rollout's id.
    fn roll_out(&self, version: &str, bytes: &[u8]) -> (u64, String) {
        self.roll_out_with(version, bytes, 30_000, &[])
    }

    /// [`Fleet::roll_out`] with the update's timeout, and `extra` bytes served after the
    /// artifact's by the blob store (the manifest's size and digest are the artifact's).
    fn roll_out_with(
        &self,
        version: &str,
        bytes: &[u8],
        timeout_ms: u64,
        extra: &[u8],
    ) -> (u64, String) {
        let file = self.h.path().join(format!("artifact-{version}"));
        std::fs::write(&file, bytes).unwrap();
        let sha = flotilla_release::artifact::sha256_file(&file).unwrap();
        let served = [bytes, extra].concat();
        let blob = if extra.is_empty() {
            sha.clone()
        } else {
            let f = self.h.path().join(format!("served-{version}"));
            std::fs::write(&f, &served).unwrap();
            flotilla_release::artifact::sha256_file(&f).unwrap()
        };
        let (os, arch) = flotilla_release::Platform::current();
        let manifest = flotilla_release::Manifest {
            name: "flotilla-agent".into(),
            version: version.into(),
            serial: 1,
            expires: "2099-01-01T00:00:00Z".into(),
            artifacts: vec![flotilla_release::Artifact {
                os: os.into(),
                arch: arch.into(),
                url: None,
                blob: Some(blob.clone()),
                sha256: sha.clone(),
                size: bytes.len() as u64,
            }],
        }
        .to_bytes();
        let signature = flotilla_release::sign(&self.secret, &manifest, "test release").unwrap();
        let id = self.rt.block_on(async {
            self.client.put_blob(&blob, served).await.unwrap();
            self.client
                .publish_release(&flotilla_api::wire::PublishReleaseRequest {
                    manifest: String::from_utf8(manifest).unwrap(),
                    signature,
                })
                .await
                .unwrap();
            let r = self
                .client
                .create_rollout(&flotilla_api::wire::CreateRolloutRequest {
                    name: "flotilla-agent".into(),
                    version: version.into(),
                    selector: Default::default(),
                    max_in_flight: 1,
                    canary: 1,
                    min_healthy_ms: 1000,
                    timeout_ms,
                })
                .await
                .unwrap();
            let id = r.rollout["id"].as_u64().unwrap();
            self.client.rollout_action(id, "approve").await.unwrap();
            id
        });
        (id, sha)
    }

    /// Waits for rollout `id` to end; its document.
    fn finished(&self, id: u64) -> serde_json::Value {
        let mut last = serde_json::Value::Null;
        let done = wait_until(DEADLINE, || {
            last = self
                .rt
                .block_on(self.client.rollout(id))
                .map(|r| r.rollout)
                .unwrap_or_default();
            matches!(last["phase"].as_str(), Some("Succeeded" | "Failed"))
        });
        assert!(
            done,
            "rollout {id} did not end: {last:#}\n{}",
            self.h.logs()
        );
        last
    }
}

#[test]
fn a_signed_release_rolls_out_through_the_authority_to_a_hand_run_agent() {
    let f = Fleet::new();
    let (id, sha) = f.roll_out("0.2.0", &good_build("fleet"));
    let r = f.finished(id);
    assert_eq!(r["phase"], "Succeeded", "{r:#}\n{}", f.h.logs());
    let host = &r["hosts"][0];
    assert_eq!(host["host"], "edge");
    assert_eq!(host["phase"], "Updated", "{r:#}");
    assert_eq!(host["running_sha256"], format!("sha256:{sha}"), "{r:#}");
    let running = f.h.running_agent();
    assert_eq!(running.exe_sha256, format!("sha256:{sha}"));
    drop(f.a);
}

#[test]
fn a_release_that_exits_at_once_halts_the_rollout_and_the_host_rolls_back() {
    let f = Fleet::new();
    let (id, _) = f.roll_out("0.2.0-bad", b"#!/bin/sh\nexit 1\n");
    let r = f.finished(id);
    assert_eq!(r["phase"], "Failed", "{r:#}\n{}", f.h.logs());
    let host = &r["hosts"][0];
    assert_eq!(host["phase"], "RolledBack", "{r:#}");
    assert_eq!(host["reason"], "CrashLoop", "{r:#}");
    let running = f.h.running_agent();
    assert_eq!(running.exe_sha256, format!("sha256:{}", f.h.old.1));
    drop(f.a);
}

#[test]
fn kill_9_of_the_agent_during_the_download_leaves_it_on_its_version_until_it_restarts() {
    let f = Fleet::new();
    let (id, sha) = f.roll_out("0.2.0", &good_build("download"));
    f.h.wait("the download", || {
        f.h.record().is_some_and(|r| r.step == Step::Downloading)
    });
    common::kill9(f.pid);
    f.h.wait("the agent to die", || !alive(f.pid));
    // Nothing was switched: current is the version that ran, nothing is staged.
    assert_eq!(f.h.current_name(), f.h.old.0.name());
    assert_eq!(f.h.root.versions().unwrap().len(), 1);
    // Started again (as its supervisor would), it takes the assignment from the start.
    f.h.start_agent_with(&f.args);
    let r = f.finished(id);
    assert_eq!(r["phase"], "Succeeded", "{r:#}\n{}", f.h.logs());
    assert_eq!(r["hosts"][0]["running_sha256"], format!("sha256:{sha}"));
    assert_eq!(f.h.running_agent().exe_sha256, format!("sha256:{sha}"));
    assert!(
        std::fs::read_dir(f.h.root.downloads_dir())
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "the interrupted download was cleared"
    );
}

/// Sends `signal` to every process of `pids`.
fn signal_all(pids: &[u32], signal: nix::sys::signal::Signal) {
    for &p in pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(p as i32), signal);
    }
}

/// Waits for the update to the good build `sha` to be staged or restarting, and checks
/// the new build has not reported yet.
fn at_the_restart(f: &Fleet, sha: &str) {
    f.h.wait("the restart of the update", || {
        matches!(
            f.h.record().map(|r| r.step),
            Some(Step::Staged | Step::Armed | Step::Proving { .. })
        )
    });
    assert!(
        f.h.reported()
            .is_some_and(|r| r["exe_sha256"] != format!("sha256:{sha}")),
        "the new build reported before the outage began: {:?}",
        f.h.reported()
    );
}

/// Asserts rollout `id` succeeded with the host Updated to `sha`, running it, nothing
/// skipped.
fn succeeded(f: &Fleet, id: u64, sha: &str) -> UpdateRecord {
    let r = f.finished(id);
    assert_eq!(r["phase"], "Succeeded", "{r:#}\n{}", f.h.logs());
    assert_eq!(r["hosts"][0]["phase"], "Updated", "{r:#}");
    assert_eq!(r["hosts"][0]["running_sha256"], format!("sha256:{sha}"));
    assert_eq!(f.h.running_agent().exe_sha256, format!("sha256:{sha}"));
    assert!(f.h.root.skip_list().unwrap().is_empty(), "nothing skipped");
    f.h.record().unwrap()
}

#[test]
fn a_good_build_stays_when_the_authority_is_frozen_longer_than_the_timeout() {
    let f = Fleet::new();
    let timeout = 10_000;
    let (id, sha) = f.roll_out_with("0.2.0", &good_build("frozen"), timeout, &[]);
    at_the_restart(&f, &sha);
    // The authority frozen (SIGSTOP): connections open, nothing answers.
    let authority = f.a.pid().expect("the authority runs");
    signal_all(&[authority], nix::sys::signal::Signal::SIGSTOP);
    let frozen = std::time::Instant::now();
    // Longer than the agent's timeout (the watchdog notices, and waits) and than the
    // authority's own backstop (2 × timeout + soak from the host's first report).
    f.h.wait("the watchdog to wait for the authority", || {
        f.h.record().is_some_and(|r| {
            r.evidence
                .iter()
                .any(|e| e.contains("the authority does not answer"))
        })
    });
    let outage = Duration::from_millis(2 * timeout + 2_000);
    wait_until(DEADLINE, || frozen.elapsed() > outage);
    signal_all(&[authority], nix::sys::signal::Signal::SIGCONT);
    let rec = succeeded(&f, id, &sha);
    assert_eq!(rec.state, UpdateState::Updated, "{}", f.h.logs());
    // The watchdog waited for the authority instead of giving up on the build; once
    // it answered, the build reported (the watchdog may notice the authority back
    // first, or the build's report may come before that look).
    assert!(
        rec.evidence
            .iter()
            .any(|e| e.contains("the authority does not answer")),
        "{:#?}",
        rec.evidence
    );
    assert!(
        rec.evidence.iter().any(|e| {
            e.contains("the authority answers again") || e.contains(") and reported at ")
        }),
        "{:#?}",
        rec.evidence
    );
}

#[test]
fn a_good_build_stays_when_the_host_sleeps_longer_than_the_timeout() {
    let f = Fleet::new();
    let timeout = 10_000;
    let (id, sha) = f.roll_out_with("0.2.0", &good_build("asleep"), timeout, &[]);
    let new_reported = || {
        f.h.reported()
            .is_some_and(|r| r["exe_sha256"] == format!("sha256:{sha}"))
    };
    f.h.wait("the proof", || {
        matches!(f.h.record().map(|r| r.step), Some(Step::Proving { .. })) || new_reported()
    });
    // The host asleep: every process of it stopped (the agent, the new build, the
    // watchdog), for longer than the timeout, before the new build reported.
    let host = common::pids_with_arg(f.h.state.to_str().unwrap());
    signal_all(&host, nix::sys::signal::Signal::SIGSTOP);
    let asleep = std::time::Instant::now();
    assert!(
        !new_reported(),
        "the new build reported before the host went to sleep"
    );
    wait_until(DEADLINE, || {
        asleep.elapsed() > Duration::from_millis(timeout + 3_000)
    });
    signal_all(&host, nix::sys::signal::Signal::SIGCONT);
    let rec = succeeded(&f, id, &sha);
    assert_eq!(rec.state, UpdateState::Updated, "{}", f.h.logs());
    // Proven after the sleep, though the restart was longer ago than the timeout.
    assert!(
        f.h.reported().unwrap()["at_ms"].as_i64().unwrap() > rec.started_ms + timeout as i64,
        "{}",
        f.h.logs()
    );
}

#[test]
fn a_blob_longer_than_its_manifest_is_refused_without_filling_the_disk() {
    let f = Fleet::new();
    let good = good_build("long-blob");
    let extra = vec![0x5a; 64 << 20];
    let (id, _) = f.roll_out_with("0.2.0", &good, 30_000, &extra);
    let r = f.finished(id);
    assert_eq!(r["phase"], "Failed", "{r:#}");
    let host = &r["hosts"][0];
    assert_eq!(host["reason"], "SizeMismatch", "{r:#}");
    assert!(
        host["detail"]
            .as_str()
            .is_some_and(|d| d.contains("reading stopped")),
        "{r:#}"
    );
    // Nothing of it is left, and the agent runs its version.
    assert!(
        std::fs::read_dir(f.h.root.downloads_dir())
            .map(|d| d.count() == 0)
            .unwrap_or(true),
        "the download was cleared"
    );
    assert_eq!(f.h.root.versions().unwrap().len(), 1, "nothing staged");
    assert_eq!(
        f.h.running_agent().exe_sha256,
        format!("sha256:{}", f.h.old.1)
    );
}

/// Under the real systemd of the testnet's systemd host (serial: `hosts::` tests).
mod hosts {
    use super::*;
    use flotilla_testkit::testnet::{self, TestHost, Testnet};

    /// A transient service unit on the systemd host running this host's agent; stopped
    /// when dropped.
    struct Unit<'a> {
        sd: &'a TestHost,
        name: String,
    }

    impl Drop for Unit<'_> {
        fn drop(&mut self) {
            let _ = self.sd.exec(&["systemctl", "stop", &self.name]);
            let _ = self.sd.exec(&["systemctl", "reset-failed", &self.name]);
        }
    }

    fn ok(out: std::process::Output) -> String {
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `program agent run …` as unit `name` (Restart=always, as the unit `agent
    /// unit` prints), waits for it to report; its pid (in the host's numbering).
    fn start<'a>(sd: &'a TestHost, h: &Host, program: &Path, tag: &str) -> (Unit<'a>, u64) {
        let name = format!("flotilla-agent-{tag}-{}.service", std::process::id());
        let inventory = h.path().join("flotilla.toml");
        ok(sd.exec(&[
            "systemd-run",
            "--unit",
            &name,
            "--property=Restart=always",
            "--property=RestartSec=500ms",
            "--property=KillMode=process",
            "--setenv=NO_COLOR=1",
            program.to_str().unwrap(),
            "agent",
            "run",
            "--inventory",
            inventory.to_str().unwrap(),
            "--state-dir",
            h.state.to_str().unwrap(),
            "--check-every",
            "500ms",
        ]));
        let unit = Unit { sd, name };
        let mut pid = 0;
        h.wait("the unit's agent to report", || {
            let main = ok(sd.exec(&["systemctl", "show", "-p", "MainPID", "--value", &unit.name]));
            pid = main.trim().parse().unwrap_or(0);
            pid != 0 && h.reported().is_some_and(|r| r["pid"] == pid)
        });
        (unit, pid)
    }

    /// `update.json` for the agent of `running.json` (numbered in the host's PID
    /// namespace, so taken as the agent wrote it).
    fn write_update(h: &Host, to: &(VersionDir, String), supervisor: &str) {
        let r = h.agent_file("running.json").unwrap();
        let now = now_ms();
        let mut rec = UpdateRecord {
            format: UPDATE_FORMAT,
            rollout: 1,
            name: "flotilla-agent".into(),
            version: to.0.version.clone(),
            serial: 1,
            key_id: "0123456789ABCDEF".into(),
            sha256: to.1.clone(),
            from: Some(Side::of(&h.old.0, &h.old.1)),
            to: Some(Side::of(&to.0, &to.1)),
            state: UpdateState::Staged,
            step: Step::Staged,
            min_healthy_ms: 1000,
            timeout_ms: 20_000,
            started_ms: now,
            updated_ms: now,
            attempts: Vec::new(),
            reason: None,
            detail: String::new(),
            evidence: Vec::new(),
            agent: Some(OldAgent {
                pid: r["pid"].as_u64().unwrap() as u32,
                start_time_ticks: r["start_time_ticks"].as_u64().unwrap(),
                exe_sha256: r["exe_sha256"].as_str().unwrap().into(),
                argv: Vec::new(),
                cwd: "/".into(),
            }),
            supervisor: supervisor.into(),
            seen: Vec::new(),
            rollbacks: 0,
        };
        rec.save(&h.root).unwrap();
    }

    /// Runs the watchdog on the systemd host as the agent starts it: a transient unit
    /// of its own (here waited for).
    fn watch(sd: &TestHost, h: &Host, supervisor: &str) -> UpdateRecord {
        let unit = format!("flotilla-agent-update-test-{}", std::process::id());
        let out = sd.exec(&[
            "systemd-run",
            "--unit",
            &unit,
            "--collect",
            "--wait",
            "--quiet",
            "--property=KillMode=process",
            "--property=RuntimeMaxSec=120",
            h.old.0.binary.to_str().unwrap(),
            "agent",
            "update-watch",
            "--root",
            h.root.root().to_str().unwrap(),
            "--state-dir",
            h.state.to_str().unwrap(),
            "--supervisor",
            supervisor,
        ]);
        let rec = h.record().expect("update.json");
        assert!(
            out.status.success(),
            "update-watch: {out:?}\n{}",
            serde_json::to_string_pretty(&rec).unwrap()
        );
        rec
    }

    /// Starts the watchdog on the systemd host as the agent starts it (a transient unit
    /// of its own), without waiting for it.
    fn start_watch_unit(sd: &TestHost, h: &Host, supervisor: &str) {
        let unit = format!("flotilla-agent-update-test-{}", std::process::id());
        ok(sd.exec(&[
            "systemd-run",
            "--unit",
            &unit,
            "--collect",
            "--quiet",
            "--property=KillMode=process",
            "--property=RuntimeMaxSec=120",
            h.old.0.binary.to_str().unwrap(),
            "agent",
            "update-watch",
            "--root",
            h.root.root().to_str().unwrap(),
            "--state-dir",
            h.state.to_str().unwrap(),
            "--supervisor",
            supervisor,
        ]));
    }

    /// A power cut, as far as this host's processes go: SIGKILL to every one of them (the
    /// agent, its watchdog, a trial of the new version), until none is left. Only the
    /// supervisor (systemd, `Restart=always`) starts anything again.
    fn power_cut(h: &Host) -> Vec<u32> {
        let mut killed = Vec::new();
        for _ in 0..3 {
            let pids = common::pids_with_arg(h.state.to_str().unwrap());
            for &pid in &pids {
                common::kill9(pid);
            }
            killed.extend(pids);
        }
        h.wait("every process of the host to die", || {
            killed.iter().all(|&p| !alive(p))
        });
        killed
    }

    /// The unit's main pid (the host's numbering), 0 when none.
    fn main_pid(sd: &TestHost, unit: &Unit) -> u64 {
        ok(sd.exec(&["systemctl", "show", "-p", "MainPID", "--value", &unit.name]))
            .trim()
            .parse()
            .unwrap_or(0)
    }

    /// Waits for the update to end `state`, then for the unit's main process to run
    /// `sha` (measured inside the host: `sha256sum /proc/<pid>/exe`), reported, and
    /// `current` to name version `dir`; the record.
    fn ends_on(
        sd: &TestHost,
        h: &Host,
        unit: &Unit,
        state: UpdateState,
        (dir, sha): &(VersionDir, String),
    ) -> UpdateRecord {
        h.wait("the update to end", || {
            h.record().is_some_and(|r| r.step == Step::Done)
        });
        let rec = h.record().unwrap();
        assert_eq!(
            rec.state,
            state,
            "{}",
            serde_json::to_string_pretty(&rec).unwrap()
        );
        h.wait(&format!("the unit to run and report sha256:{sha}"), || {
            let main = main_pid(sd, unit);
            if main == 0 {
                return false;
            }
            let measured = sd.exec(&["sha256sum", &format!("/proc/{main}/exe")]);
            String::from_utf8_lossy(&measured.stdout).starts_with(sha.as_str())
                && h.reported()
                    .is_some_and(|r| r["pid"] == main && r["exe_sha256"] == format!("sha256:{sha}"))
        });
        assert_eq!(h.current_name(), dir.name(), "current");
        rec
    }

    /// A build that exits a second after it starts.
    const EXITS_SOON: &[u8] = b"#!/bin/sh\nsleep 1\nexit 1\n";

    /// Kills every process of a systemd host at the update step `at` reaches (with
    /// `bad`, staged as 0.2.0), then lets systemd alone start things: the host must end
    /// on the previous version, measured, with a working agent, and the update
    /// `RolledBack`. `at` drives the update to the step (and returns once it holds).
    fn power_cut_at(tag: &str, bad: &[u8], at: impl FnOnce(&TestHost, &Host, &str)) {
        let _serial = testnet::lock();
        let net = Testnet::get();
        let sd = net.systemd_host();
        let h = Host::new_in(&sd.home);
        let (unit, _) = start(sd, &h, &h.current_binary(), tag);
        let supervisor = format!("systemd:{}", unit.name);
        let new = h.stage("0.2.0", bad);
        write_update(&h, &new, &supervisor);
        at(sd, &h, &supervisor);
        let step = h.record().unwrap().step;
        power_cut(&h);
        let rec = ends_on(sd, &h, &unit, UpdateState::RolledBack, &h.old);
        assert!(
            h.root.skipped(&new.1).unwrap().is_some(),
            "the bad build is skipped"
        );
        assert_eq!(h.current_name(), h.old.0.name());
        eprintln!(
            "power cut at {step:?}: rolled back ({:?}: {})",
            rec.reason, rec.detail
        );
    }

    /// Sets the record's step as the watchdog leaves it, and saves it.
    fn set_step(h: &Host, step: Step) {
        let mut rec = h.record().unwrap();
        rec.step = step;
        rec.state = UpdateState::Restarting;
        rec.save(&h.root).unwrap();
    }

    #[test]
    fn a_power_cut_right_after_staging_ends_on_the_previous_version() {
        // The updater staged and wrote the record; no watchdog ran yet.
        power_cut_at("cut-staged", EXITS_SOON, |_, _, _| {});
    }

    #[test]
    fn a_power_cut_with_the_trial_armed_ends_on_the_previous_version() {
        // The watchdog armed the trial and died before it asked for the restart.
        power_cut_at("cut-armed", EXITS_SOON, |_, h, _| set_step(h, Step::Armed));
    }

    #[test]
    fn a_power_cut_while_a_bad_build_is_proven_ends_on_the_previous_version() {
        power_cut_at("cut-proving", EXITS_SOON, |sd, h, supervisor| {
            start_watch_unit(sd, h, supervisor);
            h.wait("a trial start of the bad build", || {
                let trial = h.record().map(|r| Trial::of(&h.root, &r));
                matches!(h.record().map(|r| r.step), Some(Step::Proving { .. }))
                    && trial.is_some_and(|t| t.boots >= 1)
            });
        });
    }

    #[test]
    fn a_power_cut_during_the_rollback_ends_on_the_previous_version() {
        power_cut_at("cut-rollback", EXITS_SOON, |sd, h, supervisor| {
            start_watch_unit(sd, h, supervisor);
            h.wait("the rollback", || {
                matches!(
                    h.record().map(|r| r.step),
                    Some(Step::RollBack | Step::ProvingRollback { .. })
                )
            });
        });
    }

    #[test]
    fn a_power_cut_while_soaking_a_build_that_then_fails_to_start_ends_on_the_previous_version() {
        let good = good_build("cut-soak");
        power_cut_at("cut-soak", &good, |sd, h, supervisor| {
            // A long soak, so that the cut lands in it.
            let mut rec = h.record().unwrap();
            rec.min_healthy_ms = 60_000;
            rec.save(&h.root).unwrap();
            start_watch_unit(sd, h, supervisor);
            h.wait("the soak", || {
                matches!(h.record().map(|r| r.step), Some(Step::Soaking { .. }))
            });
            // After the cut the new build no longer starts (a build that ran until
            // the reboot and then fails at start).
            let to = h.record().unwrap().to.unwrap().binary;
            let tmp = to.with_extension("broken");
            std::fs::write(&tmp, EXITS_SOON).unwrap();
            std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            std::fs::rename(&tmp, &to).unwrap();
        });
    }

    #[test]
    fn a_power_cut_while_committing_a_proven_build_finishes_the_update() {
        let _serial = testnet::lock();
        let net = Testnet::get();
        let sd = net.systemd_host();
        let h = Host::new_in(&sd.home);
        let (unit, _) = start(sd, &h, &h.current_binary(), "cut-commit");
        let supervisor = format!("systemd:{}", unit.name);
        let new = h.stage("0.2.0", &good_build("cut-commit"));
        write_update(&h, &new, &supervisor);
        // Proven and soaked; the watchdog died before it flipped current.
        set_step(&h, Step::Committing);
        power_cut(&h);
        let rec = ends_on(sd, &h, &unit, UpdateState::Updated, &new);
        assert!(
            rec.attempts
                .iter()
                .any(|a| a.what.starts_with("flip: current")),
            "{:#?}",
            rec.attempts
        );
    }

    #[test]
    fn a_systemd_unit_running_current_is_updated_through_systemctl_restart() {
        let _serial = testnet::lock();
        let net = Testnet::get();
        let sd = net.systemd_host();
        // In the systemd host's home: its /tmp is its own, and the workspace may be
        // under this machine's /tmp.
        let h = Host::new_in(&sd.home);
        let (unit, pid) = start(sd, &h, &h.current_binary(), "current");
        // Detected from INVOCATION_ID and the cgroup.
        let journal = ok(sd.exec(&["journalctl", "-u", &unit.name, "--no-pager", "-o", "cat"]));
        let supervisor = format!("systemd:{}", unit.name);
        assert!(
            journal.contains(&format!("supervisor {supervisor}")),
            "{journal}"
        );
        let new = h.stage("0.2.0", &good_build("systemd"));
        write_update(&h, &new, &supervisor);
        let rec = watch(sd, &h, &supervisor);
        assert_eq!(
            rec.state,
            UpdateState::Updated,
            "{}",
            serde_json::to_string_pretty(&rec).unwrap()
        );
        let main: u64 = ok(sd.exec(&["systemctl", "show", "-p", "MainPID", "--value", &unit.name]))
            .trim()
            .parse()
            .unwrap();
        assert_ne!(main, pid);
        let reported = h.reported().unwrap();
        assert_eq!(reported["pid"], main);
        assert_eq!(reported["exe_sha256"], format!("sha256:{}", new.1));
        assert!(
            rec.attempts
                .iter()
                .any(|a| a.what.contains("restart --no-block")),
            "{:#?}",
            rec.attempts
        );
    }

    /// A component the agent starts while it runs as a systemd service lives in a
    /// transient scope of its own, not in the agent's cgroup: killing every process
    /// of the agent's unit leaves it running, and the agent restarted by systemd
    /// finds it as it was.
    #[test]
    fn components_of_an_agent_unit_run_in_scopes_of_their_own() {
        let _serial = testnet::lock();
        let net = Testnet::get();
        let sd = net.systemd_host();
        let h = Host::new_in(&sd.home);
        let pid_file = h.path().join("c.pid");
        std::fs::write(
            h.path().join("flotilla.toml"),
            format!(
                "[components.c]\ncommand = [\"/bin/sh\", \"-c\", \"echo $$ > {}; exec sleep 3600\"]\n",
                pid_file.display()
            ),
        )
        .unwrap();
        let (unit, _) = start(sd, &h, &h.current_binary(), "scope");
        let mut pid = String::new();
        let mut cgroup = String::new();
        let placed = wait_until(DEADLINE, || {
            pid = std::fs::read_to_string(&pid_file)
                .unwrap_or_default()
                .trim()
                .to_string();
            if pid.is_empty() {
                return false;
            }
            cgroup =
                String::from_utf8_lossy(&sd.exec(&["cat", &format!("/proc/{pid}/cgroup")]).stdout)
                    .into_owned();
            cgroup.contains("/flotilla-c-") && cgroup.contains(".scope")
        });
        assert!(
            placed,
            "c (pid {pid:?}) is not in a scope of its own: {cgroup}\nagent:\n{}\n{}",
            ok(sd.exec(&["journalctl", "-u", &unit.name, "--no-pager", "-o", "cat"])),
            h.logs()
        );
        assert!(!cgroup.contains(&unit.name), "{cgroup}");
        // Every process of the agent's unit killed: c is not one of them.
        ok(sd.exec(&["systemctl", "kill", "--signal=SIGKILL", &unit.name]));
        h.wait("the agent to be started again and report", || {
            let main = ok(sd.exec(&["systemctl", "show", "-p", "MainPID", "--value", &unit.name]));
            let main: u64 = main.trim().parse().unwrap_or(0);
            main != 0 && h.reported().is_some_and(|r| r["pid"] == main)
        });
        assert!(
            sd.exec(&["kill", "-0", &pid]).status.success(),
            "c (pid {pid}) died with the agent's unit"
        );
        assert_eq!(
            std::fs::read_to_string(&pid_file).unwrap().trim(),
            pid,
            "c was started again"
        );
        drop(unit);
        let _ = sd.exec(&["kill", &pid]);
    }

    #[test]
    fn a_systemd_unit_pointed_at_a_stale_path_is_restart_had_no_effect() {
        let _serial = testnet::lock();
        let net = Testnet::get();
        let sd = net.systemd_host();
        // In the systemd host's home: its /tmp is its own, and the workspace may be
        // under this machine's /tmp.
        let h = Host::new_in(&sd.home);
        let (unit, _) = start(sd, &h, &h.old.0.binary, "stale");
        let supervisor = format!("systemd:{}", unit.name);
        let new = h.stage("0.2.0", &good_build("systemd-stale"));
        write_update(&h, &new, &supervisor);
        let rec = watch(sd, &h, &supervisor);
        assert_eq!(rec.state, UpdateState::RolledBack);
        assert_eq!(
            rec.reason,
            Some(Reason::RestartHadNoEffect),
            "{}",
            serde_json::to_string_pretty(&rec).unwrap()
        );
        assert_eq!(h.current_name(), h.old.0.name());
        assert!(h.root.skipped(&new.1).unwrap().is_some());
        let reported = h.reported().unwrap();
        assert_eq!(reported["exe_sha256"], format!("sha256:{}", h.old.1));
    }
}

#[test]
fn a_running_agent_restarts_a_watchdog_killed_during_the_soak() {
    let h = Host::new();
    let (w_pid, soaking, _) = h.soaking_update("orphan");
    common::kill9(w_pid);
    // The new agent (alive) notices the unfinished update and its free lock.
    h.wait("the update to finish", || {
        h.record().is_some_and(|r| r.step == Step::Done)
    });
    let rec = h.record().unwrap();
    assert_eq!(rec.state, UpdateState::Updated, "{}", h.logs());
    assert_eq!(h.running_agent().pid, soaking);
}
