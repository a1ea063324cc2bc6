//! The agent run in this process (its own runtime, on a thread) against a local
//! inventory and real stand-in services: converging, applying an edit to just the
//! component it changes, stopping a removed one, restarting nothing after an agent
//! restart; and supervision telling a clean exit from a failure (the agent is the
//! parent of what it starts, so it knows their exit statuses).

use flotilla_agent::{
    Agent, AgentConfig, InventoryLoader, LoadError, LoadedInventory, LocalInventory, LocalReporter,
};
use flotilla_model::{validate, Format, SourceFile, Sources};
use flotilla_testkit::{alive, wait_until};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DEADLINE: Duration = Duration::from_secs(30);

/// One inventory file, no templates, project `inproc`.
fn loader() -> impl InventoryLoader {
    |path: &Path| {
        let bytes = std::fs::read(path).map_err(|e| LoadError::Unreadable(e.to_string()))?;
        let mut sources = Sources::new();
        let name = path.display().to_string();
        let id = sources.add(SourceFile::from_bytes(
            name.clone(),
            Format::from_path(&name),
            bytes,
        ));
        match validate(&sources, id, &[]) {
            Ok(mut v) => {
                v.topology.set_project("inproc");
                Ok(LoadedInventory {
                    topology: v.topology,
                    base_dir: path.parent().unwrap().to_path_buf(),
                    files: vec![path.to_path_buf()],
                })
            }
            Err(d) => Err(LoadError::Invalid(format!("{} diagnostics", d.len()))),
        }
    }
}

/// An agent on its own thread; stopped (like SIGTERM) when dropped.
struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(dir: &Path) -> Running {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&log);
        let dir = dir.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .unwrap();
            let log: flotilla_agent::Log =
                Arc::new(move |l: &str| lines.lock().unwrap().push(l.to_string()));
            let state = dir.join("state");
            let source = LocalInventory::new(
                &dir.join("flotilla.toml"),
                "local",
                loader(),
                Duration::from_millis(50),
            )
            .unwrap();
            let reporter = LocalReporter::new(state.join("agent/status.json"), Arc::clone(&log));
            let cfg = AgentConfig {
                host: "local".into(),
                state_dir: Some(state),
                ready_timeout: Duration::from_secs(20),
                check_every: Duration::from_millis(50),
                report_every: Duration::from_secs(1),
                host_timeout: Duration::from_secs(5),
                log,
            };
            rt.block_on(Agent::new(cfg, source, reporter).run(async {
                let _ = rx.await;
            }))
            .unwrap();
        });
        Running {
            stop: Some(tx),
            thread: Some(thread),
            log,
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

struct KillPids(PathBuf);

impl Drop for KillPids {
    fn drop(&mut self) {
        for e in std::fs::read_dir(&self.0).into_iter().flatten().flatten() {
            if e.path().extension().is_some_and(|x| x == "pid") {
                if let Some(p) = read_pid(&e.path()) {
                    let _ = nix::sys::signal::killpg(
                        nix::unistd::Pid::from_raw(p as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
    }
}

fn read_pid(p: &Path) -> Option<u32> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn pid(dir: &Path, name: &str) -> Option<u32> {
    read_pid(&dir.join(format!("{name}.pid")))
}

fn report(dir: &Path) -> serde_json::Value {
    std::fs::read_to_string(dir.join("state/agent/status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn lifecycle(dir: &Path, name: &str) -> String {
    report(dir)["status"]["components"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name).cloned())
        .map(|c| c["lifecycle"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

fn journal_len(dir: &Path) -> usize {
    let db = dir.join("state/projects/inproc/state.db");
    flotilla_store::Store::open(&db)
        .unwrap()
        .operations(1000)
        .unwrap()
        .len()
}

fn service(name: &str, extra: &str) -> String {
    let kit = flotilla_testkit::binary();
    format!(
        "[components.{name}]\ncommand = [{kit:?}, \"--pid-file\", \"{name}.pid\"{extra}]\nstop = {{ grace_period = \"2s\" }}\n"
    )
}

fn wait(agent: &Running, dir: &Path, what: &str, cond: impl FnMut() -> bool) {
    assert!(
        wait_until(DEADLINE, cond),
        "timed out waiting for {what}\nlog:\n{}\nreport:\n{:#}",
        agent.log(),
        report(dir)
    );
}

#[test]
fn applies_what_changed_stops_what_was_removed_and_restarts_nothing_after_a_restart() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let _kill = KillPids(dir.to_path_buf());
    let write = |arg: &str, with_c: bool| {
        let mut s = service("a", "");
        s.push_str(&service("b", &format!(", \"--exec-name\", \"{arg}\"")));
        if with_c {
            s.push_str(&service("c", ""));
        }
        std::fs::write(dir.join("flotilla.toml"), s).unwrap();
    };
    write("one", true);
    let agent = Running::start(dir);
    let runs = |n: &str| lifecycle(dir, n) == "running" && pid(dir, n).is_some_and(alive);
    wait(&agent, dir, "a, b, c running", || {
        runs("a") && runs("b") && runs("c")
    });
    let (a, b, c) = (
        pid(dir, "a").unwrap(),
        pid(dir, "b").unwrap(),
        pid(dir, "c").unwrap(),
    );

    write("two", false);
    wait(&agent, dir, "b restarted and c stopped", || {
        pid(dir, "b").is_some_and(|p| p != b && alive(p)) && runs("b") && !alive(c)
    });
    assert_eq!(pid(dir, "a"), Some(a));
    let b2 = pid(dir, "b").unwrap();
    drop(agent);
    assert!(alive(a) && alive(b2), "components outlive the agent");

    let ops = journal_len(dir);
    let again = Running::start(dir);
    wait(&again, dir, "the second agent's report", || {
        again.log().contains("status: ") && runs("a") && runs("b")
    });
    assert_eq!((pid(dir, "a"), pid(dir, "b")), (Some(a), Some(b2)));
    assert_eq!(journal_len(dir), ops, "nothing journaled:\n{}", again.log());
}

#[test]
fn a_clean_exit_is_restarted_under_always_only() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let _kill = KillPids(dir.to_path_buf());
    let mut s = service(
        "onfail",
        ", \"--crash-after\", \"600\", \"--exit-code\", \"0\"",
    );
    s.push_str("restart = { policy = \"on-failure\", backoff = \"50ms\" }\n");
    s.push_str(&service(
        "always",
        ", \"--crash-after\", \"600\", \"--exit-code\", \"0\"",
    ));
    s.push_str("restart = { policy = \"always\", backoff = \"50ms\", max_restarts = 1 }\n");
    std::fs::write(dir.join("flotilla.toml"), s).unwrap();
    let agent = Running::start(dir);
    wait(
        &agent,
        dir,
        "on-failure to leave the clean exit, always to give up",
        || {
            let l = agent.log();
            l.contains("`onfail` exited cleanly")
                && l.contains("`always`: crash loop: 1 restart in")
        },
    );
    let l = agent.log();
    assert!(l.contains("exit status 0"), "{l}");
    assert!(!l.contains("restarted `onfail`"), "{l}");
    assert!(l.contains("restarted `always` (restart 1 of 1)"), "{l}");
}
