//! Projects cannot touch each other: two inventories with same-named components, in
//! two directories, sharing one (default) state directory, driven interleaved — each
//! sees, plans against and signals only its own processes; another project's process
//! on one of its ports is reported as that project's, never adopted or stopped. And a
//! state directory from before projects keeps working: the first project that changes
//! something takes it over.

mod common;

use flotilla_testkit::{alive, free_port, wait_until};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(15);

/// One project: its own directory and inventory (`llm` on its own port, and `web`
/// using it), and the state directory it shares with the other.
struct Project {
    dir: PathBuf,
    state: PathBuf,
    port: u16,
}

impl Project {
    fn new(root: &Path, name: &str, state: &Path, port: u16, extra: &str) -> Project {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let kit = flotilla_testkit::binary();
        std::fs::write(
            dir.join("flotilla.toml"),
            format!(
                "{extra}[components.llm]\ncommand = [{kit:?}, \"--listen\", \"127.0.0.1:{port}\", \"--pid-file\", {pid:?}]\n\
                 endpoints = {{ http = \"http://127.0.0.1:{port}\" }}\n\
                 readiness = {{ http = {{ endpoint = \"http\", path = \"/\" }}, period = \"50ms\" }}\n\
                 stop = {{ grace_period = \"2s\" }}\n\
                 [stacks.chat]\ncomponents = [\"llm\"]\n",
                pid = dir.join("llm.pid"),
            ),
        )
        .unwrap();
        Project {
            dir,
            state: state.to_path_buf(),
            port,
        }
    }

    fn run(&self, args: &[&str]) -> common::Run {
        common::run_with_env(
            &self.dir,
            args,
            &[("FLOTILLA_STATE_DIR", self.state.to_str().unwrap())],
        )
    }

    fn ok(&self, args: &[&str]) -> common::Run {
        let r = self.run(args);
        assert_eq!(r.code, 0, "{args:?}:\n{}\n{}", r.stdout, r.stderr);
        r
    }

    fn pid(&self) -> u32 {
        std::fs::read_to_string(self.dir.join("llm.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    fn llm(&self) -> serde_json::Value {
        let st = self.run(&["status", "--json", "llm"]).json();
        st["components"][0].clone()
    }
}

#[test]
fn two_projects_sharing_a_state_directory_never_touch_each_other() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("shared-state");
    let a = Project::new(root.path(), "alpha", &state, free_port(), "");
    let b = Project::new(
        root.path(),
        "beta",
        &state,
        free_port(),
        "project = \"bee\"\n",
    );

    a.ok(&["up", "chat"]);
    let a_pid = a.pid();
    let _ga = common::KillOnDrop(a_pid);
    // beta sees nothing of alpha's llm: stopped, and its plan starts its own.
    let llm = b.llm();
    assert_eq!(llm["lifecycle"], "stopped", "{llm:#}");
    assert!(llm["runtime_identity"].is_null(), "{llm:#}");
    let plan = b.ok(&["plan", "up", "chat"]);
    assert!(plan.stdout.contains("start  llm"), "{}", plan.stdout);
    // stop in beta touches nothing of alpha's.
    b.ok(&["stop", "llm"]);
    assert!(alive(a_pid), "beta's stop signalled alpha's llm");
    b.ok(&["up", "chat"]);
    let b_pid = b.pid();
    let _gb = common::KillOnDrop(b_pid);
    assert_ne!(a_pid, b_pid);
    assert_eq!(a.llm()["runtime_identity"]["measured"]["pid"], a_pid);
    assert_eq!(b.llm()["runtime_identity"]["measured"]["pid"], b_pid);
    assert!(state.join("projects/alpha/state.db").exists());
    assert!(state.join("projects/bee/state.db").exists());
    assert!(state.join("projects/bee/logs/llm.log").exists());

    // alpha down: only alpha's process goes.
    a.ok(&["down", "chat"]);
    assert!(wait_until(DEADLINE, || !alive(a_pid)));
    assert!(alive(b_pid), "alpha's down stopped beta's llm");
    assert_eq!(b.llm()["lifecycle"], "running");

    // A third project whose llm has beta's port: beta's process is reported as
    // beta's, never adopted, and its start is refused naming the project.
    let c = Project::new(root.path(), "gamma", &state, b.port, "");
    let llm = c.llm();
    assert_eq!(llm["condition"], "attention", "{llm:#}");
    let ev = serde_json::to_string(&llm["evidence"]).unwrap();
    assert!(ev.contains("flotilla project `bee`"), "{ev}");
    let up = c.run(&["up", "chat"]);
    assert_ne!(up.code, 0);
    assert!(
        format!("{}{}", up.stdout, up.stderr).contains("flotilla project `bee`"),
        "{}\n{}",
        up.stdout,
        up.stderr
    );
    let stop = c.run(&["stop", "llm"]);
    assert!(
        alive(b_pid),
        "gamma's stop signalled beta's llm: {}",
        stop.stderr
    );
    b.ok(&["down", "chat"]);
    assert!(wait_until(DEADLINE, || !alive(b_pid)));
}

/// The same project name under two state directories: the process of the one is
/// named by its state directory in the other's status.
#[test]
fn the_same_project_in_another_state_directory_is_named_by_that_directory() {
    let (r1, r2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (s1, s2) = (r1.path().join("state"), r2.path().join("state"));
    let port = free_port();
    let a = Project::new(r1.path(), "twin", &s1, port, "");
    a.ok(&["up", "chat"]);
    let _ga = common::KillOnDrop(a.pid());
    let b = Project::new(r2.path(), "twin", &s2, port, "");
    let llm = b.llm();
    assert_eq!(llm["condition"], "attention", "{llm:#}");
    let ev = serde_json::to_string(&llm["evidence"]).unwrap();
    let dir = s1.join("projects/twin");
    assert!(
        ev.contains(&format!("flotilla project `twin` in {}", dir.display())),
        "{ev}"
    );
    a.ok(&["down", "chat"]);
}

#[test]
fn a_state_directory_from_before_projects_is_taken_over_by_the_first_change() {
    let root = tempfile::tempdir().unwrap();
    let state = root.path().join("old-state");
    let p = Project::new(root.path(), "solo", &state, free_port(), "");
    // Make the old layout: run it with a state directory, then move the project's
    // files to the top as versions before projects kept them.
    p.ok(&["up", "chat"]);
    let pid = p.pid();
    let _g = common::KillOnDrop(pid);
    let proj = state.join("projects/solo");
    for f in ["state.db", "state.db-wal", "state.db-shm", "logs"] {
        let _ = std::fs::rename(proj.join(f), state.join(f));
    }
    std::fs::remove_dir_all(state.join("projects")).unwrap();
    // Read-only verbs read it where it is, and move nothing.
    let llm = p.llm();
    assert_eq!(llm["lifecycle"], "running", "{llm:#}");
    assert_eq!(llm["runtime_identity"]["measured"]["pid"], pid);
    assert!(!state.join("projects").exists(), "status moved files");
    // The first change takes it over: the running llm is still known, not duplicated.
    p.ok(&["up", "chat"]);
    assert!(proj.join("state.db").exists());
    assert!(!state.join("state.db").exists());
    assert_eq!(p.llm()["runtime_identity"]["measured"]["pid"], pid);
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("ls {}", proj.join("logs").display()))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("llm.log"));
    p.ok(&["down", "chat"]);
    assert!(wait_until(DEADLINE, || !alive(pid)));
}
