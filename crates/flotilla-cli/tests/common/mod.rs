//! Helpers shared by the CLI tests: run the real `flotilla` binary on files in a
//! temporary directory.

#![allow(dead_code)]

pub mod agent;
pub mod authority;
pub mod browser;
pub mod release;
pub mod sessions;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// One local `process` component, `sleeper` (`sleep 600`).
pub const SLEEPER: &str = r#"
[hosts.local]
transport = "local"

[components.sleeper]
adapter = "process"
host = "local"
command = ["sleep", "600"]
"#;

/// A temporary directory holding an inventory (and maybe templates).
pub struct Workspace {
    pub dir: tempfile::TempDir,
}

impl Workspace {
    pub fn new() -> Self {
        Workspace {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    /// Writes `text` to `name` (relative; parent directories created).
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs `flotilla ARGS` in this directory.
    pub fn run(&self, args: &[&str]) -> Run {
        run_in(self.path(), args)
    }
}

/// Runs the binary in `dir`.
pub fn run_in(dir: &Path, args: &[&str]) -> Run {
    run_with_env(dir, args, &[])
}

/// Runs the binary in `dir` with extra environment variables. The state directory
/// defaults to `<dir>/.flotilla-state` so tests never touch the user's.
pub fn run_with_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("FLOTILLA_FILE")
        .env_remove("FLOTILLA_LOG")
        .env_remove("FLOTILLA_LOG_FORMAT")
        .env("FLOTILLA_STATE_DIR", dir.join(".flotilla-state"))
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out: Output = cmd.output().expect("run flotilla");
    Run {
        code: out.status.code().expect("exit code"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What a run printed and returned.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo root")
}

/// The state of the project whose inventory is in `inventory_dir` (no `project` key, no
/// `-p`: the directory's name) below the state directory `state`.
pub fn project_dir(state: &Path, inventory_dir: &Path) -> PathBuf {
    let name = inventory_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    state
        .join("projects")
        .join(flotilla_model::topology::project_from_dir_name(&name))
}

/// SIGKILLs a process (by pid) when dropped: a test's guard against leaving one behind.
pub struct KillOnDrop(pub u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The arguments of process `pid` as this machine numbers it (empty when it is gone).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The live processes (of this machine and of every test host's PID namespace) one
/// of whose arguments is exactly `marker`.
pub fn pids_with_arg(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| cmdline(pid).iter().any(|a| a == marker))
        .collect()
}

/// SIGKILLs `pid` (gone already is fine).
pub fn kill9(pid: u32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

/// The lines `out` writes (a child's stdout), as they come, on a channel read from a
/// thread of its own; it closes when `out` does.
pub fn lines_of(out: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead as _;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}
