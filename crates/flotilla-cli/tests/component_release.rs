//! Component releases end to end on this machine: a real `flotilla serve`, a real
//! agent joined to it, converging a component whose program is the workspace's
//! stand-in service kept in an install root (`<root>/current/svc`), and releases of
//! that program signed offline and rolled out through the authority: a new build is
//! switched, the component restarted through its adapter and proven by the digest
//! measured from its running process (`/proc/<pid>/exe`, and `status --server`) with
//! its readiness probe passing; a build that exits at once is rolled back to the
//! previous version (measured, healthy); a release signed by a key the agent does not
//! trust changes nothing.

mod common;

use common::authority::{free_port, Authority};
use flotilla_release::InstallRoot;
use flotilla_testkit::wait_until;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(60);

/// The authority, one agent host `h1` running component `svc` from install root
/// `<tmp>/opt/svc`, and the release key.
struct Setup {
    a: Authority,
    tmp: tempfile::TempDir,
    root: PathBuf,
    agent: Option<Child>,
    log: PathBuf,
}

fn platform() -> String {
    let (os, arch) = flotilla_release::Platform::current();
    format!("{os}-{arch}")
}

impl Setup {
    fn new() -> Setup {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("opt").join("svc");
        let installed = InstallRoot::new(&root, "svc")
            .install_binary(&flotilla_testkit::binary(), "1.0.0")
            .unwrap();
        assert!(installed.binary.is_file());
        let port = free_port();
        let program = root.join("current").join("svc");
        let inventory = format!(
            r#"
[hosts.h1]
transport = "agent"
platform = "{platform}"

[components.svc]
host = "h1"
command = [{program:?}, "--listen", "127.0.0.1:{port}"]
release = {{ name = "svc", root = {root:?} }}
endpoints = {{ http = "http://127.0.0.1:{port}" }}
readiness = {{ http = {{ endpoint = "http", path = "/" }}, period = "50ms" }}
stop = {{ grace_period = "2s" }}
"#,
            platform = platform(),
        );
        let a = Authority::new(&inventory);
        let r = a.publish(&[]);
        assert_eq!(r.code, 0, "{r:?}");
        let r = a.run(&["release", "keygen", "--dir", "keys", "--name", "release"]);
        assert_eq!(r.code, 0, "{r:?}");
        let mut s = Setup {
            log: tmp.path().join("agent.log"),
            a,
            tmp,
            root,
            agent: None,
        };
        std::fs::create_dir_all(s.home()).unwrap();
        let token =
            s.a.run(&["serve", "token", "create", "--host", "h1", "--json"]);
        assert_eq!(token.code, 0, "{token:?}");
        let t = token.json();
        let out = s
            .command(&[
                "agent",
                "join",
                &s.a.url,
                t["token"].as_str().unwrap(),
                "--ca-hash",
                t["ca_hash"].as_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "agent join: {out:?}");
        let keys = s.state().join("agent").join("trusted-keys");
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::copy(
            s.a.ws.path().join("keys/release.pub"),
            keys.join("release.pub"),
        )
        .unwrap();
        let log = std::fs::File::create(&s.log).unwrap();
        s.agent = Some(
            s.command(&[
                "agent",
                "run",
                "--check-every",
                "200ms",
                "--report-every",
                "500ms",
                "--timeout",
                "20s",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
        );
        s.wait("svc to run, healthy, on the installed version", |s| {
            s.svc()["health"] == "healthy"
                && s.measured().as_deref()
                    == Some(common::release::sha256_of(&installed.binary).as_str())
        });
        s
    }

    fn home(&self) -> PathBuf {
        self.tmp.path().join("home")
    }

    fn state(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        c.args(args)
            .current_dir(self.home())
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_SERVER")
            .env("HOME", self.home())
            .env("FLOTILLA_STATE_DIR", self.state())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// `svc` in `flotilla status --server --json`.
    fn svc(&self) -> serde_json::Value {
        let r = self.a.run(&["status", "--json"]);
        let v: serde_json::Value =
            serde_json::from_str(&r.stdout).unwrap_or(serde_json::Value::Null);
        v["components"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["name"] == "svc").cloned())
            .unwrap_or(serde_json::Value::Null)
    }

    /// The pid of svc's running process, as the authority's status reports it.
    fn pid(&self) -> Option<u64> {
        self.svc()["runtime_identity"]["measured"]["pid"].as_u64()
    }

    /// svc's measured digest through the authority, checked against `/proc/<pid>/exe`.
    fn measured(&self) -> Option<String> {
        let svc = self.svc();
        let reported = svc["runtime_identity"]["measured"]["exe_sha256"].as_str()?;
        let pid = svc["runtime_identity"]["measured"]["pid"].as_u64()? as u32;
        let proc = flotilla_exec::identity::measure(pid).ok().flatten()?;
        (proc.exe_sha256 == reported).then(|| reported.to_string())
    }

    fn wait(&self, what: &str, mut cond: impl FnMut(&Setup) -> bool) {
        if !wait_until(DEADLINE, || cond(self)) {
            let status = self.a.run(&["release", "status", "--json"]);
            panic!(
                "timed out waiting for {what}\nsvc: {:#}\nrollouts: {}\nagent log:\n{}\nupdate.json: {}",
                self.svc(),
                status.stdout,
                std::fs::read_to_string(&self.log).unwrap_or_default(),
                std::fs::read_to_string(self.root.join("update.json")).unwrap_or_default()
            );
        }
    }

    /// Writes `bytes` as build `version` of `svc`, makes a manifest, signs it with
    /// `key` and publishes it; the artifact's measured form `sha256:<hex>`.
    fn release(&self, version: &str, serial: u64, bytes: &[u8], key: &str) -> String {
        common::release::publish(
            |a| self.a.run(a),
            self.a.ws.path(),
            "svc",
            version,
            serial,
            &platform(),
            bytes,
            key,
        )
        .1
    }

    /// Creates and approves a rollout of `svc` `version`; its id.
    fn roll_out(&self, version: &str) -> u64 {
        let r =
            common::release::create_rollout(|a| self.a.run(a), "svc", version, "", 1, "2s", "20s");
        let hosts: Vec<&str> = r["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["host"].as_str().unwrap())
            .collect();
        assert_eq!(
            hosts,
            ["h1"],
            "the host that runs a component of release svc"
        );
        let id = r["id"].as_u64().unwrap();
        let r = self.a.run(&["release", "approve", &id.to_string()]);
        assert_eq!(r.code, 0, "{r:?}");
        id
    }

    fn rollout(&self, id: u64) -> serde_json::Value {
        let r = self
            .a
            .run(&["release", "status", &id.to_string(), "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(mut c) = self.agent.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // The component (its own process group), whatever version it runs.
        if let Some(pid) = self.pid() {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// The stand-in service with bytes appended: another digest, the same program.
fn new_build(tag: &str) -> Vec<u8> {
    let mut b = std::fs::read(flotilla_testkit::binary()).unwrap();
    b.extend_from_slice(format!("\nflotilla-test-build:{tag}\n").as_bytes());
    b
}

#[test]
fn a_component_release_is_switched_restarted_proven_by_measured_digest_and_healthy() {
    let s = Setup::new();
    let pid_before = s.pid().unwrap();
    let sha = s.release("2.0.0", 2, &new_build("2.0.0"), "keys/release.key");
    let id = s.roll_out("2.0.0");
    s.wait("the rollout to succeed", |s| {
        s.rollout(id)["phase"] == "Succeeded"
    });
    let r = s.rollout(id);
    assert_eq!(r["hosts"][0]["phase"], "Updated", "{r:#}");
    assert_eq!(r["hosts"][0]["running_sha256"], sha.as_str(), "{r:#}");
    let svc = s.svc();
    assert_eq!(s.measured().as_deref(), Some(sha.as_str()), "{svc:#}");
    assert_ne!(s.pid(), Some(pid_before), "restarted: {svc:#}");
    assert_eq!(svc["health"], "healthy", "{svc:#}");
    // The status shows the measured digest against the selected release.
    assert_eq!(
        svc["runtime_identity"]["release"]["version"], "2.0.0",
        "{svc:#}"
    );
    let hex = sha.trim_start_matches("sha256:");
    let text = s.a.run(&["status"]);
    assert!(
        text.stdout
            .contains(&format!("sha256:{} = svc 2.0.0", &hex[..12])),
        "{}",
        text.stdout
    );
    // The install root switched: current is the new version, previous the old one.
    let root = InstallRoot::new(&s.root, "svc");
    assert_eq!(root.current().unwrap().version, "2.0.0");
    assert_eq!(root.previous().unwrap().version, "1.0.0");
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(s.root.join("update.json")).unwrap()).unwrap();
    assert_eq!(rec["state"], "Updated", "{rec:#}");
}

#[test]
fn a_component_build_that_exits_at_once_is_rolled_back_to_the_old_digest() {
    let s = Setup::new();
    let old = s.measured().unwrap();
    s.release("3.0.0", 3, b"#!/bin/sh\nexit 1\n", "keys/release.key");
    let id = s.roll_out("3.0.0");
    s.wait("the rollout to halt", |s| {
        s.rollout(id)["phase"] == "Failed"
    });
    let r = s.rollout(id);
    assert_eq!(r["hosts"][0]["phase"], "RolledBack", "{r:#}");
    assert!(r["hosts"][0]["reason"].is_string(), "{r:#}");
    s.wait("svc back on the old digest, healthy", |s| {
        s.measured().as_ref() == Some(&old) && s.svc()["health"] == "healthy"
    });
    let root = InstallRoot::new(&s.root, "svc");
    assert_eq!(root.current().unwrap().version, "1.0.0");
    let skip = std::fs::read_to_string(s.root.join("skip.json")).unwrap();
    assert!(skip.contains("3.0.0"), "{skip}");
}

#[test]
fn a_component_release_signed_by_an_untrusted_key_changes_nothing() {
    let s = Setup::new();
    let old = s.measured().unwrap();
    let pid = s.pid();
    let r =
        s.a.run(&["release", "keygen", "--dir", "other", "--name", "other"]);
    assert_eq!(r.code, 0, "{r:?}");
    s.release("9.0.0", 9, &new_build("9.0.0"), "other/other.key");
    let id = s.roll_out("9.0.0");
    s.wait("the rollout to fail", |s| {
        s.rollout(id)["phase"] == "Failed"
    });
    let r = s.rollout(id);
    assert_eq!(r["hosts"][0]["phase"], "Failed", "{r:#}");
    assert_eq!(r["hosts"][0]["reason"], "SignatureInvalid", "{r:#}");
    assert_eq!(s.measured(), Some(old));
    assert_eq!(s.pid(), pid, "not restarted");
    let versions = std::fs::read_dir(s.root.join("versions")).unwrap().count();
    assert_eq!(versions, 1, "nothing downloaded or staged");
}

#[test]
fn a_skipped_component_release_is_shown_and_cleared_through_the_authority() {
    let s = Setup::new();
    let root = InstallRoot::new(&s.root, "svc");
    let sha = "e".repeat(64);
    root.add_skip(flotilla_release::SkipEntry {
        name: "svc".into(),
        version: "3.0.0".into(),
        sha256: sha.clone(),
        reason: flotilla_release::Reason::CrashLoop,
        at_ms: 1_700_000_000_000,
    })
    .unwrap();
    // The agent reports the component root's skip list; the status shows it.
    let line = "skips svc 3.0.0 (sha256:eeeeeeeeeeee, rolled back CrashLoop): `flotilla release unskip 3.0.0 --host h1 --name svc` allows it again";
    s.wait("the status to show the skip entry", |s| {
        s.a.run(&["status"]).stdout.contains(line)
    });
    let r = s.a.run(&[
        "release", "unskip", "3.0.0", "--host", "h1", "--name", "svc",
    ]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stdout.contains("cleared svc 3.0.0 on h1")
            && r.stdout
                .contains("sha256:eeeeeeeeeeee rolled back CrashLoop"),
        "{r:?}"
    );
    assert_eq!(root.skipped(&sha).unwrap(), None);
    assert!(!s.a.run(&["status"]).stdout.contains("skips svc"));
}
