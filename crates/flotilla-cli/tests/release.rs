//! Releases end to end on this machine: a real `flotilla serve`, three real agents
//! (run by hand, each from its own install root, pinning the release key), a release
//! signed with `flotilla release sign` and relayed by `release publish`, rolled out
//! with `release rollout` / `approve`: canary first, approval honoured, every host
//! proven `Updated` by the digest measured from its running agent's `/proc/<pid>/exe`;
//! a bad build halts the rollout after the canary, which is back on the previous
//! version (measured) while the other hosts were never touched; refused releases
//! change nothing. A halted rollout is rolled back on demand (`release rollback`): the
//! host it changed runs its old build again (measured), the others are untouched, and
//! an agent that no longer keeps what it ran before refuses the lower serial.

mod common;

use common::authority::Authority;
use common::{pids_with_arg, KillOnDrop};
use flotilla_testkit::wait_until;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(90);

const HOSTS: [&str; 3] = ["r1", "r2", "r3"];

fn inventory() -> String {
    let mut t = String::new();
    for h in HOSTS {
        t.push_str(&format!(
            "[hosts.{h}]\ntransport = \"agent\"\nplatform = \"linux-x86_64\"\nlabels = {{ pool = \"test\" }}\n\n"
        ));
    }
    t
}

/// One agent host: an install root with this `flotilla` installed, a state dir.
struct Host {
    name: &'static str,
    dir: PathBuf,
    root: PathBuf,
    state: PathBuf,
}

impl Host {
    fn new(base: &Path, name: &'static str, a: &Authority, public_key: &Path) -> Host {
        let dir = base.join(name);
        let root = dir.join("install");
        let state = dir.join("state");
        std::fs::create_dir_all(&dir).unwrap();
        let h = Host {
            name,
            dir,
            root,
            state,
        };
        let out = h
            .command(Path::new(env!("CARGO_BIN_EXE_flotilla")))
            .args(["agent", "install", "--root"])
            .arg(&h.root)
            .output()
            .unwrap();
        assert!(out.status.success(), "agent install: {out:?}");
        let token = a.run(&["serve", "token", "create", "--host", name, "--json"]);
        assert_eq!(token.code, 0, "{token:?}");
        let t = token.json();
        let out = h
            .command(&h.current())
            .args([
                "agent",
                "join",
                &a.url,
                t["token"].as_str().unwrap(),
                "--ca-hash",
                t["ca_hash"].as_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "agent join: {out:?}");
        let keys = h.state.join("agent").join("trusted-keys");
        std::fs::create_dir_all(&keys).unwrap();
        std::fs::copy(public_key, keys.join("release.pub")).unwrap();
        h
    }

    fn current(&self) -> PathBuf {
        self.root.join("current").join("flotilla")
    }

    fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        c.current_dir(&self.dir)
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_SERVER")
            .env("HOME", &self.dir)
            .env("FLOTILLA_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    /// Starts `<root>/current/flotilla agent run` by hand.
    fn start(&self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .unwrap();
        let child = self
            .command(&self.current())
            .args([
                "agent",
                "run",
                "--host",
                self.name,
                "--supervisor",
                "none",
                "--check-every",
                "500ms",
                "--report-every",
                "1s",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        // Reaped by a thread: the watchdog kills it during an update.
        std::thread::spawn(move || {
            let mut child = child;
            let _ = child.wait();
        });
    }

    /// The pids of this host's `agent run` processes (its state directory is in their
    /// environment, not in their arguments).
    fn agent_pids(&self) -> Vec<u32> {
        let marker = format!("FLOTILLA_STATE_DIR={}", self.state.display());
        pids_with_arg("run")
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/environ"))
                    .map(|e| e.split(|&c| c == 0).any(|v| v == marker.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }

    /// The measured digest (`sha256:<hex>`) of the one agent running for this host.
    fn measured(&self) -> Option<String> {
        let pids = self.agent_pids();
        let [pid] = pids.as_slice() else {
            return None;
        };
        flotilla_exec::identity::measure(*pid)
            .ok()
            .flatten()
            .map(|i| i.exe_sha256)
    }

    fn log(&self) -> String {
        let mut s = std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default();
        s.push_str(
            &std::fs::read_to_string(self.state.join("agent").join("agent.log"))
                .unwrap_or_default(),
        );
        s
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        for p in self.agent_pids() {
            let _ = KillOnDrop(p);
        }
    }
}

struct Fleet {
    a: Authority,
    hosts: Vec<Host>,
    key: PathBuf,
}

impl Fleet {
    fn new() -> Fleet {
        let a = Authority::new(&inventory());
        assert_eq!(a.publish(&[]).code, 0);
        let keygen = a.run(&["release", "keygen", "--dir", "keys", "--name", "release"]);
        assert_eq!(keygen.code, 0, "{keygen:?}");
        let public = a.ws.path().join("keys/release.pub");
        let base = a.ws.path().join("hosts");
        let hosts: Vec<Host> = HOSTS
            .iter()
            .map(|h| Host::new(&base, h, &a, &public))
            .collect();
        for h in &hosts {
            h.start();
        }
        let f = Fleet {
            key: a.ws.path().join("keys/release.key"),
            a,
            hosts,
        };
        // Every agent said what it runs (the rollout takes each host's platform there).
        f.wait("every agent to report its identity", |f| {
            let s = f.a.run(&["status", "--json"]);
            s.code == 0 && f.hosts.iter().all(|h| h.measured().is_some())
        });
        f
    }

    fn wait(&self, what: &str, mut cond: impl FnMut(&Fleet) -> bool) {
        if !wait_until(DEADLINE, || cond(self)) {
            let logs: Vec<String> = self
                .hosts
                .iter()
                .map(|h| format!("--- {} ---\n{}", h.name, h.log()))
                .collect();
            let status = self.a.run(&["release", "status", "--json"]);
            panic!(
                "timed out waiting for {what}\nrollout: {}\n{}",
                status.stdout,
                logs.join("\n")
            );
        }
    }

    /// Writes `bytes` as an artifact, makes, signs and publishes release `version`.
    fn release(&self, version: &str, serial: u64, bytes: &[u8]) -> (PathBuf, String) {
        common::release::publish(
            |a| self.a.run(a),
            self.a.ws.path(),
            "flotilla-agent",
            version,
            serial,
            "linux-x86_64",
            bytes,
            self.key.to_str().unwrap(),
        )
    }

    fn rollout(&self, version: &str, min_healthy: &str, timeout: &str) -> serde_json::Value {
        common::release::create_rollout(
            |a| self.a.run(a),
            "flotilla-agent",
            version,
            "pool=test",
            2,
            min_healthy,
            timeout,
        )
    }

    fn status(&self, id: u64) -> serde_json::Value {
        let r = self
            .a
            .run(&["release", "status", &id.to_string(), "--json"]);
        assert_eq!(r.code, 0, "{r:?}");
        r.json()
    }
}

fn host_phase(r: &serde_json::Value, host: &str) -> String {
    r["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["host"] == host)
        .map(|h| h["phase"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// The test binary with bytes appended: another digest, the same program.
fn new_build(tag: &str) -> Vec<u8> {
    let mut b = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    b.extend_from_slice(format!("\nflotilla-test-build:{tag}\n").as_bytes());
    b
}

#[test]
fn a_signed_release_rolls_out_canary_first_and_every_host_runs_its_measured_digest() {
    let f = Fleet::new();
    let old: Vec<String> = f.hosts.iter().map(|h| h.measured().unwrap()).collect();
    let (_file, sha) = f.release("2.0.0", 2, &new_build("2.0.0"));
    let r = f.rollout("2.0.0", "2s", "60s");
    let id = r["id"].as_u64().unwrap();
    assert_eq!(r["phase"], "AwaitingApproval");
    assert_eq!(r["hosts"][0]["canary"], true);
    // Approval honoured: nothing moves before it (the agents poll and report meanwhile).
    let reported_before = f.a.run(&["status", "--json"]);
    assert_eq!(reported_before.code, 0);
    for (h, old) in f.hosts.iter().zip(&old) {
        assert_eq!(
            h.measured().as_ref(),
            Some(old),
            "{} changed before approval",
            h.name
        );
    }
    let r = f.a.run(&["release", "approve", &id.to_string()]);
    assert_eq!(r.code, 0, "{r:?}");
    f.wait("the rollout to succeed", |f| {
        f.status(id)["phase"] == "Succeeded"
    });
    let r = f.status(id);
    let events: Vec<String> = r["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap().to_string())
        .collect();
    let canary = r["hosts"][0]["host"].as_str().unwrap().to_string();
    let canary_done = events
        .iter()
        .position(|e| e.contains(&canary) && e.contains("Updated"))
        .unwrap_or_else(|| panic!("no canary Updated event: {events:#?}"));
    let first_other = events
        .iter()
        .position(|e| !e.contains(&canary) && e.contains("Updating"))
        .unwrap_or_else(|| panic!("no other host Updating: {events:#?}"));
    assert!(canary_done < first_other, "canary first: {events:#?}");
    // The status shows each agent's measured digest against the selected release.
    let text = f.a.run(&["status"]);
    assert_eq!(
        text.stdout
            .matches("(measured) = release flotilla-agent 2.0.0")
            .count(),
        3,
        "{}",
        text.stdout
    );
    for h in &f.hosts {
        assert_eq!(host_phase(&r, h.name), "Updated", "{r:#}");
        assert_eq!(
            h.measured().as_deref(),
            Some(sha.as_str()),
            "{}: measured digest",
            h.name
        );
    }
}

#[test]
fn a_bad_build_halts_after_the_canary_which_is_rolled_back_and_the_rest_is_untouched() {
    let f = Fleet::new();
    let old: Vec<String> = f.hosts.iter().map(|h| h.measured().unwrap()).collect();
    f.release(
        "3.0.0",
        3,
        b"#!/bin/sh\necho this build exits at once >&2\nexit 3\n",
    );
    let r = f.rollout("3.0.0", "2s", "30s");
    let id = r["id"].as_u64().unwrap();
    let canary = r["hosts"][0]["host"].as_str().unwrap().to_string();
    assert_eq!(f.a.run(&["release", "approve", &id.to_string()]).code, 0);
    f.wait("the rollout to halt", |f| f.status(id)["phase"] == "Failed");
    let r = f.status(id);
    assert_eq!(host_phase(&r, &canary), "RolledBack", "{r:#}");
    assert!(r["halted"].is_string(), "{r:#}");
    for (h, old) in f.hosts.iter().zip(&old) {
        if h.name == canary {
            f.wait("the canary's old agent to run again", |_| {
                h.measured().as_ref() == Some(old)
            });
        } else {
            assert_eq!(host_phase(&r, h.name), "Pending", "{r:#}");
            assert_eq!(h.measured().as_ref(), Some(old), "{} was touched", h.name);
        }
    }
}

#[test]
fn refused_releases_change_nothing() {
    let f = Fleet::new();
    let old = f.hosts[0].measured().unwrap();
    // Signed by a key the agents do not trust.
    let r =
        f.a.run(&["release", "keygen", "--dir", "other", "--name", "other"]);
    assert_eq!(r.code, 0);
    let file = f.a.ws.path().join("flotilla-9");
    std::fs::write(&file, new_build("9")).unwrap();
    let manifest = "release-9.json";
    for args in [
        vec![
            "release",
            "manifest",
            "flotilla-agent",
            "9.0.0",
            "--serial",
            "9",
            "--artifact",
            &format!("linux-x86_64={}", file.display()),
            "-o",
            manifest,
        ],
        vec!["release", "sign", manifest, "--key", "other/other.key"],
        vec![
            "release",
            "publish",
            "release-9.json.minisig",
            "--artifact",
            file.to_str().unwrap(),
        ],
    ] {
        let r = f.a.run(&args);
        assert_eq!(r.code, 0, "{r:?}");
    }
    let r = f.rollout("9.0.0", "1s", "30s");
    let id = r["id"].as_u64().unwrap();
    assert_eq!(f.a.run(&["release", "approve", &id.to_string()]).code, 0);
    f.wait("the rollout to fail", |f| f.status(id)["phase"] == "Failed");
    let r = f.status(id);
    let canary = &r["hosts"][0];
    assert_eq!(canary["phase"], "Failed", "{r:#}");
    assert_eq!(canary["reason"], "SignatureInvalid", "{r:#}");
    assert_eq!(f.hosts[0].measured().as_deref(), Some(old.as_str()));
    // Nothing was downloaded or staged.
    let versions: Vec<_> = std::fs::read_dir(f.hosts[0].root.join("versions"))
        .unwrap()
        .collect();
    assert_eq!(versions.len(), 1, "only the installed version");
}

/// `release rollback ID --json` through the fleet's operator.
fn rollback(f: &Fleet, id: u64) -> common::Run {
    f.a.run(&["release", "rollback", &id.to_string(), "--json"])
}

#[test]
fn a_halted_rollout_is_rolled_back_on_demand_to_what_each_host_ran_and_only_there() {
    let f = Fleet::new();
    let old: Vec<String> = f.hosts.iter().map(|h| h.measured().unwrap()).collect();
    let (_file, new) = f.release("2.0.0", 2, &new_build("2.0.0"));

    // A rollout that changed nothing has nothing to roll back.
    let r = f.rollout("2.0.0", "1s", "30s");
    let untouched = r["id"].as_u64().unwrap();
    assert_eq!(
        f.a.run(&["release", "abort", &untouched.to_string()]).code,
        0
    );
    let r = rollback(&f, untouched);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("changed no host"), "{}", r.stderr);

    // The canary starts alone; the rollout is halted at once, so the canary finishes
    // and the other hosts are never started.
    let r = f.rollout("2.0.0", "1s", "30s");
    let id = r["id"].as_u64().unwrap();
    assert_eq!(f.a.run(&["release", "approve", &id.to_string()]).code, 0);
    let running = rollback(&f, id);
    assert_eq!(running.code, 1, "{running:?}");
    assert!(
        running.stderr.contains("halt it first"),
        "{}",
        running.stderr
    );
    assert_eq!(f.a.run(&["release", "abort", &id.to_string()]).code, 0);
    f.wait("the halted rollout's canary to finish", |f| {
        let r = f.status(id);
        host_phase(&r, "r1") == "Updated"
    });
    let r = f.status(id);
    assert_eq!(r["phase"], "Failed", "{r:#}");
    assert_eq!(r["halted"], "Aborted", "{r:#}");
    assert_eq!(host_phase(&r, "r2"), "Pending", "{r:#}");
    assert_eq!(f.hosts[0].measured().as_deref(), Some(new.as_str()));

    // What r1 ran before (the build `agent install` put there) was never published.
    let r = rollback(&f, id);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no longer available"), "{}", r.stderr);
    assert!(
        r.stderr.contains(&old[0]["sha256:".len()..]),
        "{}",
        r.stderr
    );
    // Published now (the same bytes, an older serial): the rollback takes it.
    let installed = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    let (_f1, one) = f.release("1.0.0", 1, &installed);
    assert_eq!(one, old[0]);
    let r = rollback(&f, id);
    assert_eq!(r.code, 0, "{r:?}");
    let back: serde_json::Value = r.json();
    let back_id = back["id"].as_u64().unwrap();
    assert_eq!(back["rollback_of"], id, "{back:#}");
    assert_eq!(back["phase"], "AwaitingApproval", "{back:#}");
    let hosts: Vec<&str> = back["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["r1"], "only the host the rollout changed: {back:#}");
    assert_eq!(back["hosts"][0]["canary"], true, "{back:#}");
    assert_eq!(back["hosts"][0]["target"]["version"], "1.0.0", "{back:#}");
    let text = f.a.run(&["release", "status", &back_id.to_string()]);
    assert!(
        text.stdout
            .contains(&format!("rollback of rollout {id}: flotilla-agent 1.0.0")),
        "{}",
        text.stdout
    );
    let all = f.a.run(&["release", "status", "--all"]);
    assert!(
        all.stdout.contains(&format!("rollback of {id}")),
        "{}",
        all.stdout
    );
    // Approval honoured: r1 still runs 2.0.0 until it is given.
    assert_eq!(f.hosts[0].measured().as_deref(), Some(new.as_str()));
    assert_eq!(
        f.a.run(&["release", "approve", &back_id.to_string()]).code,
        0
    );
    f.wait("the rollback to succeed", |f| {
        f.status(back_id)["phase"] == "Succeeded"
    });
    // Measured: the canary runs its old build again; the others never moved.
    f.wait("r1's old agent to run again", |f| {
        f.hosts[0].measured().as_ref() == Some(&old[0])
    });
    for (h, old) in f.hosts.iter().zip(&old).skip(1) {
        assert_eq!(h.measured().as_ref(), Some(old), "{} was touched", h.name);
    }
    let text = f.a.run(&["status"]);
    assert!(
        text.stdout
            .contains("(measured) = release flotilla-agent 1.0.0"),
        "{}",
        text.stdout
    );
}

#[test]
fn an_agent_refuses_a_rollback_to_a_release_it_no_longer_keeps() {
    let f = Fleet::new();
    let old = f.hosts[0].measured().unwrap();
    let installed = std::fs::read(env!("CARGO_BIN_EXE_flotilla")).unwrap();
    f.release("1.0.0", 1, &installed);
    let (_file, new) = f.release("2.0.0", 2, &new_build("2.0.0"));
    let r = f.rollout("2.0.0", "1s", "30s");
    let id = r["id"].as_u64().unwrap();
    assert_eq!(f.a.run(&["release", "approve", &id.to_string()]).code, 0);
    assert_eq!(f.a.run(&["release", "abort", &id.to_string()]).code, 0);
    f.wait("the canary to finish", |f| {
        host_phase(&f.status(id), "r1") == "Updated"
    });
    // r1 no longer keeps what it ran before (pruned, say): `previous` and its version.
    let root = &f.hosts[0].root;
    let previous = std::fs::canonicalize(root.join("previous")).unwrap();
    std::fs::remove_file(root.join("previous")).unwrap();
    std::fs::remove_dir_all(&previous).unwrap();
    let r = rollback(&f, id);
    assert_eq!(r.code, 0, "{r:?}");
    let back_id = r.json()["id"].as_u64().unwrap();
    assert_eq!(
        f.a.run(&["release", "approve", &back_id.to_string()]).code,
        0
    );
    f.wait("the rollback to halt", |f| {
        f.status(back_id)["phase"] == "Failed"
    });
    let r = f.status(back_id);
    assert_eq!(r["hosts"][0]["phase"], "Failed", "{r:#}");
    assert_eq!(r["hosts"][0]["reason"], "SerialRollback", "{r:#}");
    let detail = r["hosts"][0]["detail"].as_str().unwrap();
    assert!(detail.contains("ran before and still keeps"), "{detail}");
    // Refused before anything was downloaded: r1 runs 2.0.0, measured.
    assert_eq!(f.hosts[0].measured().as_deref(), Some(new.as_str()));
    assert_ne!(new, old);
    assert!(
        !root.join("versions").read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with("1.0.0-")),
        "nothing staged"
    );
}
