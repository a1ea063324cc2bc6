//! A real `flotilla agent` process for fleet tests: joined with a one-time token,
//! run with short check and report periods, killed (with every component it
//! started) when dropped.

use super::authority::{Authority, CANARY};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A real `flotilla agent` (for the host its join token names), with its own state
/// directory and home under a test's root.
pub struct AgentProc {
    child: Option<Child>,
    pub home: PathBuf,
    pub state: PathBuf,
    pub log: PathBuf,
}

impl AgentProc {
    /// An agent under `a`'s workspace, joined as `host`'s with a fresh token (not
    /// started).
    pub fn joined(a: &Authority, host: &str) -> AgentProc {
        let agent = AgentProc::new(a.ws.path());
        agent.join_with_token(a, host, &[]);
        agent
    }

    /// Joins as `host`'s agent with a fresh token (`extra`: more `serve token
    /// create` arguments, e.g. `--keep-credentials`); panics when it fails.
    pub fn join_with_token(&self, a: &Authority, host: &str, extra: &[&str]) {
        let mut args = vec!["serve", "token", "create", "--host", host, "--json"];
        args.extend_from_slice(extra);
        let t = a.run(&args);
        assert_eq!(t.code, 0, "{t:?}");
        let t = t.json();
        let out = self.join(
            &a.url,
            t["token"].as_str().unwrap(),
            t["ca_hash"].as_str().unwrap(),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn new(root: &Path) -> AgentProc {
        let home = root.join("agent-home");
        let state = root.join("agent-state");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        // The secret lives with the agent's host, as it would on the real machine.
        let secrets = state.join("secrets.env");
        std::fs::write(&secrets, format!("MODEL_KEY={CANARY}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o600)).unwrap();
        AgentProc {
            child: None,
            log: root.join("agent.log"),
            home,
            state,
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_flotilla"));
        c.args(args)
            .current_dir(&self.home)
            .env_remove("FLOTILLA_FILE")
            .env_remove("FLOTILLA_SERVER")
            .env("HOME", &self.home)
            .env("FLOTILLA_STATE_DIR", &self.state)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        c
    }

    pub fn join(&self, url: &str, token: &str, ca_hash: &str) -> std::process::Output {
        self.command(&["agent", "join", url, token, "--ca-hash", ca_hash])
            .output()
            .unwrap()
    }

    pub fn start(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = self
            .command(&[
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
            .unwrap();
        self.child = Some(child);
    }

    /// The running agent's pid.
    #[allow(dead_code)]
    pub fn child_pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    pub fn pid(&self, name: &str) -> Option<u32> {
        std::fs::read_to_string(self.home.join(format!("{name}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        self.kill9();
        // Every component it started (each writes `<name>.pid` in the agent's home).
        let names: Vec<String> = std::fs::read_dir(&self.home)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                e.file_name()
                    .to_str()?
                    .strip_suffix(".pid")
                    .map(str::to_string)
            })
            .collect();
        for n in &names {
            if let Some(p) = self.pid(n) {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(p as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
