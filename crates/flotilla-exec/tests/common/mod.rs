//! Shared test helpers: the test service binary, free loopback ports, a guard that
//! kills what a test started, and deadline-based polling (the only place tests sleep).
#![allow(dead_code)]

use flotilla_exec::identity::{self, IdentityMatch};
use flotilla_exec::process::{self, ProcessSpec, StartedProcess};
use flotilla_model::topology::{Check, Probe};
use flotilla_model::values::HumanDuration;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The workspace root (two levels above this crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate sits in <workspace>/crates/<name>")
        .to_path_buf()
}

/// Path to the `flotilla-testkit` binary, built with `cargo build -p flotilla-testkit`
/// the first time it is missing.
pub fn testkit() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("target"));
        let bin = target.join("debug").join("flotilla-testkit");
        if !bin.exists() {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let status = std::process::Command::new(cargo)
                .args(["build", "-p", "flotilla-testkit"])
                .current_dir(workspace())
                .status()
                .expect("run cargo build -p flotilla-testkit");
            assert!(status.success(), "cargo build -p flotilla-testkit failed");
        }
        assert!(bin.exists(), "{} missing after build", bin.display());
        bin
    })
    .clone()
}

/// A TCP port on 127.0.0.1 that was free a moment ago
/// ([`flotilla_testkit::free_port`]: below the ephemeral range).
pub fn free_port() -> u16 {
    flotilla_testkit::free_port()
}

/// Polls `f` every 5 ms until it returns `Some`, panicking with `what` after
/// `timeout`. The one place tests wait.
pub fn poll_until<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let mut found = None;
    let held = flotilla_testkit::wait_until(timeout, || {
        found = f();
        found.is_some()
    });
    assert!(held, "timed out after {timeout:?} waiting for {what}");
    found.expect("condition held")
}

/// Waits for a log line starting with `prefix`; returns the line.
pub fn wait_for_line(log: &Path, prefix: &str) -> String {
    poll_until(
        Duration::from_secs(10),
        &format!("`{prefix}` in {}", log.display()),
        || {
            std::fs::read_to_string(log)
                .ok()?
                .lines()
                .find(|l| l.starts_with(prefix))
                .map(str::to_string)
        },
    )
}

/// A spec for `program args` in `dir`, logging to `dir/logs/<component>.log`.
pub fn spec(dir: &Path, component: &str, program: &str, args: &[&str]) -> ProcessSpec {
    ProcessSpec {
        component: component.into(),
        program: program.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        inherit_env: true,
        cwd: dir.to_path_buf(),
        log_path: dir.join("logs").join(format!("{component}.log")),
        log_max_bytes: 1 << 20,
        log_keep: 2,
        start_note: String::new(),
    }
}

/// A started process, SIGKILLed with its whole group on drop (if it is still the
/// same process).
pub struct Running {
    pub started: StartedProcess,
    pub log: PathBuf,
}

impl Running {
    pub fn start(spec: &ProcessSpec) -> Running {
        let started = process::start(spec).expect("start");
        Running {
            started,
            log: spec.log_path.clone(),
        }
    }
    pub fn pid(&self) -> u32 {
        self.started.identity.pid
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let id = &self.started.identity;
        if let Ok((IdentityMatch::Same, _)) = identity::verify(id) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(id.pgid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // Also any group member left behind by a leader that already died.
        if let Ok(members) = process::group_members(id.pgid) {
            if !members.is_empty() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(id.pgid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}

/// Starts the test service with `args` in `dir`.
pub fn start_testkit(dir: &Path, component: &str, args: &[&str]) -> Running {
    let kit = testkit();
    Running::start(&spec(dir, component, kit.to_str().unwrap(), args))
}

/// A probe with Kubernetes-like defaults (period 1 s, timeout 1 s).
pub fn probe(check: Check) -> Probe {
    Probe {
        check,
        failure_threshold: 3,
        initial_delay: HumanDuration(Duration::ZERO),
        period: HumanDuration(Duration::from_secs(1)),
        success_threshold: 1,
        timeout: HumanDuration(Duration::from_secs(1)),
    }
}

#[allow(unused_imports)]
pub use flotilla_testkit::alive;
